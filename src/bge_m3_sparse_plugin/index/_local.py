"""The index job's backend on one machine: one engine, the shards in turn."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from itertools import islice
from pathlib import Path

from ._job import EncoderLike, Job, ShardResults, Vector, encode_rows
from ._reader import Row, id_base, read_rows

__all__ = ["LocalBackend", "shards_of"]


def shards_of(rows: Iterator[Row], rows_per_shard: int) -> Iterator[tuple[int, list[Row]]]:
    """Consecutive rows, ``rows_per_shard`` at a time, with the shard's index."""
    index = 0
    while chunk := list(islice(rows, rows_per_shard)):
        yield index, chunk
        index += 1


class LocalBackend:
    """Reads the input here and encodes it with one engine, ``batch_size`` texts a call."""

    def __init__(
        self,
        job: Job,
        files: list[Path],
        make_encoder: Callable[[], EncoderLike],
        batch_size: int,
    ) -> None:
        self.job, self.files = job, files
        self.make_encoder, self.batch_size = make_encoder, batch_size

    def describe(self) -> list[str]:
        return []  # one engine, here: the summary says all

    def shards(
        self, done: frozenset[int], ready: Callable[[float], None]
    ) -> Generator[ShardResults, None, None]:
        job = self.job
        encoder: EncoderLike | None = None
        rows = read_rows(self.files, job.id_column, job.text_column, id_base(self.files))
        try:
            for index, chunk in shards_of(rows, job.rows_per_shard):
                if index in done:
                    continue
                if encoder is None:  # only when there is work: a finished job starts no engine
                    encoder = self.make_encoder()
                    ready(time.time())
                results: list[Vector | str] = []
                for start in range(0, len(chunk), self.batch_size):
                    results.extend(encode_rows(encoder, chunk[start : start + self.batch_size]))
                yield index, chunk, results
        finally:
            if encoder is not None:
                # Stopped here on every way out (a sink or a shard that fails
                # included), not by the interpreter's teardown, where vLLM's
                # engine shutdown raced other threads and the process could
                # abort (SIGABRT).
                encoder.close()
