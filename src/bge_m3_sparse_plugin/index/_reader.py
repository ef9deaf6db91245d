"""Read a corpus as a stream of rows: JSONL, Parquet or CSV, in files, folders or globs.

Each row keeps where it came from (file and row number), so that a bad row
can be reported and a row without an id gets a stable one. Nothing here
decides what a good text is beyond its type: see :func:`check_text`.
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FORMATS", "Row", "check_text", "count_rows", "read_rows", "resolve_inputs"]

FORMATS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".csv": "csv",
}


@dataclass(frozen=True)
class Row:
    id: str
    text: object  # as read: checked by check_text
    file: str
    row: int  # 0-based, in the file
    problem: str | None = None  # why the row cannot be read at all


def resolve_inputs(specs: list[str]) -> list[Path]:
    """The input files, in a stable order: each file as given, each folder's
    files of a known format sorted by name, each glob's matches sorted."""
    files: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FORMATS
            )
            if not found:
                raise ValueError(f"{spec}: no {', '.join(sorted(FORMATS))} files in this folder")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True) if os.path.isfile(p))
            if not matches:
                raise ValueError(f"{spec}: no such file, folder or glob match")
            files.extend(matches)
    for path in files:
        if path.suffix.lower() not in FORMATS:
            raise ValueError(
                f"{path}: unknown format {path.suffix!r}; the inputs are JSONL (.jsonl, .json, "
                ".ndjson), Parquet (.parquet) or CSV (.csv)"
            )
    return files


def _row_id(value: object, path: Path, row: int) -> str:
    if value is None or value == "":
        return f"{path.name}:{row}"
    return str(value)


def _jsonl_rows(path: Path, id_column: str, text_column: str) -> Iterator[Row]:
    with open(path, "rb") as f:
        for row, raw in enumerate(f):
            if not raw.strip():
                continue
            fallback = f"{path.name}:{row}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Row(
                    fallback,
                    None,
                    str(path),
                    row,
                    f"undecodable bytes: {exc.reason} at byte {exc.start}",
                )
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                yield Row(fallback, None, str(path), row, f"not valid JSON: {exc.msg}")
                continue
            if not isinstance(record, dict):
                yield Row(
                    fallback, None, str(path), row, f"a JSON {type(record).__name__}, not an object"
                )
                continue
            rid = _row_id(record.get(id_column), path, row)
            if text_column not in record:
                yield Row(rid, None, str(path), row, f"no {text_column!r} field")
                continue
            yield Row(rid, record[text_column], str(path), row)


def _parquet_rows(path: Path, id_column: str, text_column: str) -> Iterator[Row]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    names = set(parquet.schema_arrow.names)
    columns = [c for c in (id_column, text_column) if c in names]
    row = 0
    for batch in parquet.iter_batches(batch_size=4096, columns=columns or None):
        data = batch.to_pydict()
        ids = data.get(id_column, [None] * batch.num_rows)
        texts = data.get(text_column)
        for i in range(batch.num_rows):
            rid = _row_id(ids[i], path, row)
            if texts is None:
                yield Row(rid, None, str(path), row, f"no {text_column!r} column")
            else:
                yield Row(rid, texts[i], str(path), row)
            row += 1


def _csv_rows(path: Path, id_column: str, text_column: str) -> Iterator[Row]:
    # Decoded line by line, so that one row with bad bytes is reported alone.
    with open(path, "rb") as f:
        lines = iter(f)
        header_raw = next(lines, b"")
        header = next(csv.reader([header_raw.decode("utf-8-sig", errors="replace")]), [])
        for row, raw in enumerate(_csv_records(lines)):
            fallback = f"{path.name}:{row}"
            try:
                text_line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Row(
                    fallback,
                    None,
                    str(path),
                    row,
                    f"undecodable bytes: {exc.reason} at byte {exc.start}",
                )
                continue
            values = next(csv.reader(io.StringIO(text_line)), [])
            record = dict(zip(header, values))
            rid = _row_id(record.get(id_column), path, row)
            if text_column not in header:
                yield Row(rid, None, str(path), row, f"no {text_column!r} column")
                continue
            yield Row(rid, record.get(text_column), str(path), row)


def _csv_records(lines: Iterator[bytes]) -> Iterator[bytes]:
    """Raw CSV records: lines joined while a quoted field spans them."""
    pending = b""
    for line in lines:
        pending += line
        if pending.count(b'"') % 2 == 0:
            if pending.strip():
                yield pending
            pending = b""
    if pending.strip():
        yield pending


def read_rows(files: list[Path], id_column: str = "id", text_column: str = "text") -> Iterator[Row]:
    """Every row of every file, in order."""
    readers = {"jsonl": _jsonl_rows, "parquet": _parquet_rows, "csv": _csv_rows}
    for path in files:
        yield from readers[FORMATS[path.suffix.lower()]](path, id_column, text_column)


def count_rows(files: list[Path]) -> int:
    """The number of rows, cheaply (Parquet metadata, newlines), for progress."""
    total = 0
    for path in files:
        kind = FORMATS[path.suffix.lower()]
        if kind == "parquet":
            import pyarrow.parquet as pq

            total += pq.ParquetFile(path).metadata.num_rows
        else:
            with open(path, "rb") as f:
                records = (
                    _csv_records(iter(f)) if kind == "csv" else (line for line in f if line.strip())
                )
                n = sum(1 for _ in records)
            total += n - 1 if kind == "csv" and n else n
    return total


def check_text(value: object) -> str | None:
    """Why ``value`` is not a text to embed, or None when it is one."""
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        return f"the text is {kind}, not a string"
    if not value.strip():
        return "the text is empty"
    return None
