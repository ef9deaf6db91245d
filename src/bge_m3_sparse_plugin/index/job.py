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

__all__ = ["Job", "Summary", "run_job", "shards_of"]


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


def encode_shard(
    encoder: EncoderLike, rows: list[Row], shard: str, batch_size: int, dense: bool
) -> tuple[ShardRows, list[dict[str, Any]]]:
    """Vectors for a shard's good rows, and an error for each bad one."""
    out = ShardRows(dense=[] if dense else None)
    errors: list[dict[str, Any]] = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        good: list[Row] = []
        for row in batch:
            reason = row.problem or check_text(row.text)
            if reason is None:
                good.append(row)
            else:
                errors.append(_error(row, shard, reason))
        if not good:
            continue
        ids = encoder.tokenize([str(row.text) for row in good])
        kept = []
        for row, tokens in zip(good, ids):
            if len(tokens) > encoder.max_tokens:
                errors.append(_error(
                    row, shard,
                    f"{len(tokens)} tokens, more than the model's {encoder.max_tokens}; "
                    "pass --truncate N to cut long texts",
                ))
            else:
                kept.append((row, tokens))
        if not kept:
            continue
        encoded = encoder.encode([tokens for _, tokens in kept])
        out.ids.extend(row.id for row, _ in kept)
        out.num_tokens.extend(len(tokens) for _, tokens in kept)
        out.indices.extend(encoded.indices)
        out.values.extend(encoded.values)
        if out.dense is not None and encoded.dense is not None:
            out.dense.extend(encoded.dense)
    return out, errors


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
    output.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.open(output, job.as_manifest())
    keep_errors(output, manifest.shards)
    summary = Summary()
    started = time.perf_counter()
    engine_seconds = 0.0
    encoder: EncoderLike | None = None
    sink: SinkLike | None = None
    rows = read_rows(files, job.id_column, job.text_column)
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
            if open_sink is not None:
                sink = open_sink(encoder.hidden_size if job.options.dense else None)
        shard, errors = encode_shard(encoder, chunk, name, batch_size, job.options.dense)
        write_shard(output, name, shard, encoder.hidden_size if job.options.dense else None)
        if sink is not None:
            sink.upsert(shard)  # keyed on the id: a shard loaded twice leaves each point once
        append_errors(output, errors)
        tokens = sum(shard.num_tokens)
        manifest.shards[name] = {
            "rows": len(chunk), "documents": len(shard.ids), "errors": len(errors), "tokens": tokens,
        }
        manifest.save(output)
        summary.shards_done += 1
        summary.rows += len(chunk)
        summary.documents += len(shard.ids)
        summary.errors += len(errors)
        summary.tokens += tokens
        if progress:
            progress(len(chunk), tokens)
    if sink is not None:
        sink.close()
    if encoder is not None:
        # Stopped here, not by the interpreter's teardown, where vLLM's engine
        # shutdown raced other threads and the process could abort (SIGABRT).
        encoder.close()
    if not manifest.shards:
        manifest.save(output)  # an empty corpus still leaves a manifest
    summary.seconds = time.perf_counter() - started - engine_seconds
    summary.engine_seconds = engine_seconds
    summary.totals = manifest.totals()
    return summary
