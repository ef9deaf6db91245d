"""The index job: rows in, shards out, resumable, whichever backend encodes.

The input rows are cut into shards of ``rows_per_shard`` consecutive rows, in
input order, so that shard N holds the same rows in every run: a resumed run
skips the shards the manifest records as done. A backend (one machine:
``_local.py``; Ray Data: ``_ray.py``) yields each shard's rows and results;
:func:`run_job`, the one writer loop, writes them through :class:`ShardWriter`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ._output import (
    Manifest,
    ShardRows,
    append_errors,
    indexed_ids,
    keep_errors,
    shard_index,
    shard_name,
    write_shard,
)
from ._reader import Row, check_text
from ._sinks import Sink
from ._types import Encoded, EncodeOptions

__all__ = [
    "DUPLICATE_ID",
    "Backend",
    "Job",
    "Progress",
    "ShardWriter",
    "Summary",
    "Vector",
    "collect",
    "encode_rows",
    "open_output",
    "run_job",
]


class EncoderLike(Protocol):
    max_tokens: int

    def tokenize(self, texts: list[str]) -> list[list[int]]: ...

    def encode(self, token_ids: list[list[int]]) -> Encoded: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Job:
    """Everything that decides the output: a resumed run must match it."""

    model: str
    inputs: list[str]
    input_sizes: list[int]
    # Nanoseconds, as os.stat gives them: with the size, what make and rsync
    # compare; a file edited in place is another job's input.
    input_mtimes: list[int]
    id_column: str
    text_column: str
    rows_per_shard: int
    options: EncodeOptions
    dtype: str
    max_model_len: int | None
    plugin_version: str
    vllm_version: str | None
    sink: str | None = None  # "KIND:TARGET collection NAME", or None

    def as_manifest(self) -> dict[str, Any]:
        job = asdict(self)
        job.update(job.pop("options"))
        return job


@dataclass
class Summary:
    rows: int = 0
    documents: int = 0
    errors: int = 0
    tokens: int = 0
    shards_done: int = 0
    shards_skipped: int = 0
    seconds: float = 0.0  # the job's, after the engine started
    engine_seconds: float = 0.0
    sink_finished: bool = False  # this run finished the sink (built its index)
    totals: dict[str, int] = field(default_factory=dict)  # the whole output, earlier runs included


# Why a row whose id an earlier row has is not indexed: the first row with an
# id, in input order, is the one indexed (docs/index.md, "Ids").
DUPLICATE_ID = "duplicate id: an earlier row has this id, and only the first is indexed"


def _error(row: Row, shard: str, reason: str) -> dict[str, Any]:
    return {"id": row.id, "file": row.file, "row": row.row, "shard": shard, "reason": reason}


@dataclass
class Vector:
    """One good row's output."""

    num_tokens: int
    indices: list[int]
    values: list[float]
    dense: list[float] | None = None


def encode_rows(encoder: EncoderLike, rows: list[Row]) -> list[Vector | str]:
    """For each row, in order, its vectors or why it is bad: one engine call.

    The single-machine loop and each Ray replica both run this.
    """
    results: list[Vector | str | None] = [row.problem or check_text(row.text) for row in rows]
    good = [i for i, result in enumerate(results) if result is None]
    if not good:
        return [r for r in results if r is not None]
    kept: list[tuple[int, list[int]]] = []
    for i, tokens in zip(good, encoder.tokenize([str(rows[i].text) for i in good])):
        if len(tokens) > encoder.max_tokens:
            results[i] = (
                f"{len(tokens)} tokens, more than the model's {encoder.max_tokens}; "
                "pass --truncate N to cut long texts"
            )
        else:
            kept.append((i, tokens))
    if kept:
        encoded = encoder.encode([tokens for _, tokens in kept])
        for k, (i, tokens) in enumerate(kept):
            dense = encoded.dense[k] if encoded.dense is not None else None
            results[i] = Vector(len(tokens), encoded.indices[k], encoded.values[k], dense)
    return [r for r in results if r is not None]


def collect(
    rows: list[Row], results: list[Vector | str], shard: str, dense: bool, ids: set[str]
) -> tuple[ShardRows, list[dict[str, Any]]]:
    """A shard's columns (its good rows, in input order) and its errors (in input order).

    ``ids`` holds the ids indexed so far (earlier shards, earlier runs): a
    row whose id is there is a duplicate, reported, never written over the
    first. The good rows' ids are added to it.
    """
    out = ShardRows(dense=[] if dense else None)
    errors: list[dict[str, Any]] = []
    for row, result in zip(rows, results, strict=True):
        if isinstance(result, str) or row.id in ids:
            errors.append(_error(row, shard, result if isinstance(result, str) else DUPLICATE_ID))
            continue
        ids.add(row.id)
        out.ids.append(row.id)
        out.num_tokens.append(result.num_tokens)
        out.indices.append(result.indices)
        out.values.append(result.values)
        if out.dense is not None and result.dense is not None:
            out.dense.append(result.dense)
    return out, errors


class ShardWriter:
    """Writes finished shards: the shard file, the sink, the error log, then
    the manifest (last, so that a shard is recorded only once all is done)."""

    def __init__(
        self,
        output: Path,
        manifest: Manifest,
        summary: Summary,
        dense_size: int | None,
        progress: Progress | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.output, self.manifest, self.summary = output, manifest, summary
        self.dense_size = dense_size
        self.progress = progress
        self.sink = sink

    def write(self, name: str, rows: int, shard: ShardRows, errors: list[dict[str, Any]]) -> None:
        write_shard(self.output, name, shard, self.dense_size)
        if self.sink is not None:
            self.sink.upsert(shard)  # keyed on the id: a shard loaded twice leaves each point once
        append_errors(self.output, errors)
        tokens = sum(shard.num_tokens)
        self.manifest.shards[name] = {
            "rows": rows,
            "documents": len(shard.ids),
            "errors": len(errors),
            "tokens": tokens,
        }
        self.manifest.save(self.output)
        summary = self.summary
        summary.shards_done += 1
        summary.rows += rows
        summary.documents += len(shard.ids)
        summary.errors += len(errors)
        summary.tokens += tokens
        if self.progress:
            self.progress.advance(rows, summary)

    def finish(self) -> None:
        # Saved again: an empty corpus still leaves a manifest, and a sink
        # that finished is recorded as such.
        self.manifest.save(self.output)
        self.summary.totals = self.manifest.totals()


def open_output(output: Path, job: Job) -> Manifest:
    """The output folder's manifest; raises :class:`~.._exceptions.OutputMismatch`
    before anything is written when ``output`` holds another job's shards.
    A missing folder is made later, by :func:`run_job`, once the sink is open."""
    manifest = Manifest.open(output, job.as_manifest())
    if output.is_dir():
        keep_errors(output, manifest.shards)
    return manifest


class Progress(Protocol):
    """What the command shows while the job runs (its progress bar)."""

    def skip(self, rows: int) -> None:
        """Rows of shards done by an earlier run."""

    def start(self) -> None:
        """The first engine is ready."""

    def advance(self, rows: int, summary: Summary) -> None:
        """A shard of ``rows`` rows is written; ``summary`` counts all so far."""


ShardResults = tuple[int, list[Row], list["Vector | str"]]


class Backend(Protocol):
    """Encodes the job's rows: one machine (``_local.py``) or Ray Data (``_ray.py``)."""

    def shards(
        self, done: frozenset[int], ready: Callable[[float], None]
    ) -> Generator[ShardResults, None, None]:
        """Each shard not in ``done``, in input order, as (index, rows, results),
        with a result per row: its vectors, or why it is bad. Starts its
        engines only when there is work, and calls ``ready(time.time())`` once
        an engine is ready (Ray: for each batch, the time its replica's was).
        Stops them when closed."""
        ...

    def describe(self) -> list[str]:
        """Lines for the summary on where the work ran (Ray: each replica's node)."""
        ...


def run_job(
    job: Job,
    output: Path,
    backend: Backend,
    total_rows: int,
    dense_size: int | None,
    open_sink: Callable[[], Sink] | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Do the shards not done yet, and return what was done.

    Raises :class:`~.._exceptions.OutputMismatch` before anything is written when
    ``output`` holds another job's shards. The sink is opened before any
    engine starts, so that an unreachable one stops the job at once.
    """
    manifest = open_output(output, job)
    done = frozenset(shard_index(name) for name in manifest.shards)
    summary = Summary(shards_skipped=len(done))
    if progress:
        for record in manifest.shards.values():
            progress.skip(record.get("rows", 0))
    started_at = time.time()
    ready_at: list[float] = []

    def ready(at: float) -> None:
        if not ready_at and progress:
            progress.start()
        ready_at.append(at)

    # A finished job opens no sink and asks no backend (no Ray, no engine). A
    # job whose shards are all recorded but whose sink did not finish (a run
    # stopped while PostgreSQL built its index) opens the sink to finish it.
    shards_left = len(done) < -(-total_rows // job.rows_per_shard)
    work = shards_left or not manifest.sink_finished
    sink = open_sink() if open_sink is not None and work else None
    try:
        # Made once the sink is open: a sink that cannot be opened leaves no OUTPUT.
        output.mkdir(parents=True, exist_ok=True)
        writer = ShardWriter(output, manifest, summary, dense_size, progress, sink)
        finished_at = started_at
        if shards_left:
            ids = indexed_ids(output, manifest.shards)
            shards = backend.shards(done, ready)
            finished_at = _write_shards(job, shards, writer, ids) or started_at
        if sink is not None:  # every shard loaded: what is built once (an index)
            sink.finish()
            manifest.sink_finished = True
            summary.sink_finished = True
        writer.finish()
    finally:
        if sink is not None:
            sink.close()
    start = min(ready_at) if ready_at else finished_at
    summary.engine_seconds = start - started_at if ready_at else 0.0
    summary.seconds = max(0.0, finished_at - start)
    return summary


def _write_shards(
    job: Job, shards: Generator[ShardResults, None, None], writer: ShardWriter, ids: set[str]
) -> float | None:
    """Write each shard the backend yields; the time the last one was recorded."""
    finished_at = None
    with closing(shards):
        for index, rows, results in shards:
            name = shard_name(index)
            shard, errors = collect(rows, results, name, job.options.dense, ids)
            writer.write(name, len(rows), shard, errors)
            # The job's time ends with the last shard recorded: the engines'
            # shutdown (which the backend runs as its last shard is taken) is
            # not the job's.
            finished_at = time.time()
    return finished_at
