"""The index job on one machine: rows in, shards out, resumable.

The input rows are cut into shards of ``rows_per_shard`` consecutive rows, in
input order, so that shard N holds the same rows in every run: a resumed run
reads past the shards the manifest records as done and does the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

from .engine import Encoded, EncodeOptions
from .output import (
    Manifest,
    ShardRows,
    append_errors,
    keep_errors,
    shard_name,
    write_shard,
)
from .reader import Row, check_text, read_rows

__all__ = [
    "Job",
    "ShardWriter",
    "Summary",
    "Vector",
    "collect",
    "encode_rows",
    "open_output",
    "run_job",
    "shards_of",
]


class EncoderLike(Protocol):
    max_tokens: int
    hidden_size: int

    def tokenize(self, texts: list[str]) -> list[list[int]]: ...

    def encode(self, token_ids: list[list[int]]) -> Encoded: ...

    def close(self) -> None: ...


class SinkLike(Protocol):
    def upsert(self, rows: ShardRows) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Job:
    """Everything that decides the output: a resumed run must match it."""

    model: str
    inputs: list[str]
    input_sizes: list[int]
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
    totals: dict[str, int] = field(default_factory=dict)  # the whole output, earlier runs included


def shards_of(rows: Iterator[Row], rows_per_shard: int) -> Iterator[tuple[int, list[Row]]]:
    index = 0
    while chunk := list(islice(rows, rows_per_shard)):
        yield index, chunk
        index += 1


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
    rows: list[Row], results: list[Vector | str], shard: str, dense: bool
) -> tuple[ShardRows, list[dict[str, Any]]]:
    """A shard's columns (its good rows, in input order) and its errors (in input order)."""
    out = ShardRows(dense=[] if dense else None)
    errors: list[dict[str, Any]] = []
    for row, result in zip(rows, results, strict=True):
        if isinstance(result, str):
            errors.append(_error(row, shard, result))
            continue
        out.ids.append(row.id)
        out.num_tokens.append(result.num_tokens)
        out.indices.append(result.indices)
        out.values.append(result.values)
        if out.dense is not None and result.dense is not None:
            out.dense.append(result.dense)
    return out, errors


def encode_shard(
    encoder: EncoderLike, rows: list[Row], shard: str, batch_size: int, dense: bool
) -> tuple[ShardRows, list[dict[str, Any]]]:
    """Vectors for a shard's good rows, and an error for each bad one."""
    results: list[Vector | str] = []
    for start in range(0, len(rows), batch_size):
        results.extend(encode_rows(encoder, rows[start : start + batch_size]))
    return collect(rows, results, shard, dense)


class ShardWriter:
    """Writes finished shards: the shard file, the sink, the error log, then
    the manifest (last, so that a shard is recorded only once all is done)."""

    def __init__(
        self,
        output: Path,
        manifest: Manifest,
        summary: Summary,
        dense_size: int | None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.output, self.manifest, self.summary = output, manifest, summary
        self.dense_size = dense_size
        self.progress = progress
        self.sink: SinkLike | None = None

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
            self.progress(rows, tokens)

    def finish(self) -> None:
        if self.sink is not None:
            self.sink.close()
        if not self.manifest.shards:
            self.manifest.save(self.output)  # an empty corpus still leaves a manifest
        self.summary.totals = self.manifest.totals()


def open_output(output: Path, job: Job) -> Manifest:
    """The output folder's manifest; raises :class:`~.output.OutputMismatch`
    before anything is written when ``output`` holds another job's shards."""
    output.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(output, job.as_manifest())
    keep_errors(output, manifest.shards)
    return manifest


def run_job(
    job: Job,
    files: list[Path],
    output: Path,
    make_encoder: Callable[[], EncoderLike],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
    on_engine_ready: Callable[[], None] | None = None,
    open_sink: Callable[[int | None], SinkLike] | None = None,
) -> Summary:
    """Do the shards not done yet. ``progress(rows, tokens)`` after each shard,
    done or skipped; ``on_engine_ready()`` once the engine has started (the
    job's time is counted from there).

    Raises :class:`~.output.OutputMismatch` before anything is written when
    ``output`` holds another job's shards.
    """
    manifest = open_output(output, job)
    summary = Summary()
    started = time.perf_counter()
    engine_seconds = 0.0
    encoder: EncoderLike | None = None
    writer: ShardWriter | None = None
    rows = read_rows(files, job.id_column, job.text_column)
    try:
        for index, chunk in shards_of(rows, job.rows_per_shard):
            name = shard_name(index)
            if name in manifest.shards:
                summary.shards_skipped += 1
                if progress:
                    progress(len(chunk), 0)
                continue
            if encoder is None:
                # Only when there is work: a finished job starts no engine.
                engine_started = time.perf_counter()
                encoder = make_encoder()
                engine_seconds = time.perf_counter() - engine_started
                if on_engine_ready:
                    on_engine_ready()
                dense_size = encoder.hidden_size if job.options.dense else None
                writer = ShardWriter(output, manifest, summary, dense_size, progress)
                if open_sink is not None:
                    writer.sink = open_sink(dense_size)
            assert writer is not None
            shard, errors = encode_shard(encoder, chunk, name, batch_size, job.options.dense)
            writer.write(name, len(chunk), shard, errors)
        if writer is None:
            writer = ShardWriter(output, manifest, summary, None)
        writer.finish()
    finally:
        if encoder is not None:
            # Stopped here on every way out (a sink or a shard that fails
            # included), not by the interpreter's teardown, where vLLM's engine
            # shutdown raced other threads and the process could abort (SIGABRT).
            encoder.close()
    # The job's time: from the engine ready to the last shard recorded.
    summary.seconds = time.perf_counter() - started - engine_seconds
    summary.engine_seconds = engine_seconds
    return summary
