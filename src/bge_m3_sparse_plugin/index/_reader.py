"""Read a corpus as a stream of rows: JSONL, Parquet or CSV, in files, folders or globs.

Each row keeps where it came from (file and row number), so that a bad row
can be reported and a row without an id gets a stable one. A row that cannot
be read (bytes that are not UTF-8, a line that is not JSON, an id or a text
that is not Unicode) is a row with a ``problem``, never an exception: the
job reports it and goes on. Nothing here decides what a good text is beyond
that: see :func:`check_text`.

CSV is read by Python's ``csv`` module (quotes, doubled quotes, newlines in
quoted fields, CRLF, a BOM), from text decoded with ``surrogateescape``: a
byte that is not UTF-8 marks only the row that holds it.
"""

from __future__ import annotations

import codecs
import csv
import glob
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "MAX_CSV_FIELD_CHARS",
    "Row",
    "check_text",
    "count_rows",
    "id_base",
    "read_rows",
    "resolve_inputs",
]

FORMATS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".csv": "csv",
}

# The longest CSV field read, in characters (the csv module's own default is
# 131,072): a longer one makes its row a bad row.
MAX_CSV_FIELD_CHARS = 1 << 24

# A lone surrogate: what a JSON "\ud800" escape gives, and what a byte that is
# not UTF-8 becomes under surrogateescape. Not Unicode text: the tokenizer,
# Parquet and the sinks all refuse it.
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Row:
    id: str
    text: object  # as read: checked by check_text
    file: str
    row: int  # 0-based, in the file
    problem: str | None = None  # why the row cannot be read at all


def resolve_inputs(specs: list[str], output: Path | None = None) -> list[Path]:
    """The input files, in a stable order: each file as given, each folder's
    files of a known format sorted by name, each glob's matches sorted.

    Files under ``output`` (the job's own shards, manifest and error log) are
    never inputs: a folder or glob that reaches into it skips them, and a
    file named inside it is refused.
    """
    own = output.resolve() if output is not None else None

    def inside_output(path: Path) -> bool:
        return own is not None and path.resolve().is_relative_to(own)

    files: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            if inside_output(path):
                raise ValueError(f"{spec}: this is the output folder, or inside it")
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix.lower() in FORMATS and not inside_output(p)
            )
            if not found:
                raise ValueError(f"{spec}: no {', '.join(sorted(FORMATS))} files in this folder")
            files.extend(found)
        elif path.is_file():
            if inside_output(path):
                raise ValueError(f"{spec}: a file of the output folder cannot be an input")
            files.append(path)
        else:
            matches = sorted(
                Path(p)
                for p in glob.glob(spec, recursive=True)
                if os.path.isfile(p) and not inside_output(Path(p))
            )
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


def id_base(files: list[Path]) -> Path:
    """The folder that holds every input: a row without an id is named by its
    file's path from here (``data.jsonl:3``; ``a/data.jsonl:3`` and
    ``b/data.jsonl:3`` for two files of one name)."""
    if not files:
        return Path.cwd()
    return Path(os.path.commonpath([str(f.resolve().parent) for f in files]))


def _file_name(path: Path, base: Path | None) -> str:
    if base is None:
        return path.name
    return path.resolve().relative_to(base).as_posix()


class _Rows:
    """Turns one file's records into rows: the one place ids and problems are decided."""

    def __init__(self, path: Path, base: Path | None, id_column: str, text_column: str) -> None:
        self.path, self.file = path, str(path)
        self.name = _file_name(path, base)
        self.id_column, self.text_column = id_column, text_column

    def bad(self, row: int, problem: str) -> Row:
        return Row(f"{self.name}:{row}", None, self.file, row, problem)

    def of(self, record: dict[str, Any], row: int, has_text: bool | None = None) -> Row:
        """The row of ``record``. ``has_text`` is False when the file has no
        text column at all; otherwise a record without the text lacks that field."""
        value = record.get(self.id_column)
        if value is None or value == "":
            row_id = f"{self.name}:{row}"
        else:
            row_id = str(value)
            if _SURROGATE.search(row_id):
                return self.bad(row, f"the {self.id_column!r} holds {_not_unicode(row_id)}")
        if has_text is False:
            return Row(row_id, None, self.file, row, f"no {self.text_column!r} column")
        if self.text_column not in record:
            return Row(row_id, None, self.file, row, f"no {self.text_column!r} field")
        text = record[self.text_column]
        if isinstance(text, str) and _SURROGATE.search(text):
            problem = f"the {self.text_column!r} holds {_not_unicode(text)}"
            return Row(row_id, None, self.file, row, problem)
        return Row(row_id, text, self.file, row)


def _not_unicode(value: str) -> str:
    """What ``value``, holding a surrogate, holds that is not Unicode text."""
    found = _SURROGATE.search(value)
    assert found is not None
    code = ord(found.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: a byte that is not UTF-8
        return f"bytes that are not UTF-8 (0x{code - 0xDC00:02x} at character {found.start()})"
    return f"a lone surrogate (U+{code:04X} at character {found.start()}), not Unicode text"


def _jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Each non-blank line and its 0-based line number (a leading BOM dropped)."""
    with open(path, "rb") as f:
        for row, line in enumerate(f):
            raw = line.removeprefix(codecs.BOM_UTF8) if row == 0 else line
            if raw.strip():
                yield row, raw


def _jsonl_rows(rows: _Rows) -> Iterator[Row]:
    for row, raw in _jsonl_lines(rows.path):
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            yield rows.bad(row, f"undecodable bytes: {exc.reason} at byte {exc.start}")
            continue
        except json.JSONDecodeError as exc:
            yield rows.bad(row, f"not valid JSON: {exc.msg}")
            continue
        if not isinstance(record, dict):
            yield rows.bad(row, f"a JSON {type(record).__name__}, not an object")
            continue
        yield rows.of(record, row)


def _holds_text(kind: Any) -> bool:
    """Whether an Arrow type holds text, or bytes read as text: every string
    and binary type, and a dictionary of one (what pandas' categoricals write)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _holds_text(kind.value_type)
    return any(
        check(kind)
        for check in (
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_string_view,
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_binary_view,
            pa.types.is_fixed_size_binary,
        )
    )


def _parquet_rows(rows: _Rows) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(rows.path)
    schema = parquet.schema_arrow
    columns = [c for c in (rows.id_column, rows.text_column) if c in schema.names]
    has_text = rows.text_column in schema.names
    row = 0
    for batch in parquet.iter_batches(batch_size=4096, columns=columns or None):
        data: dict[str, list[Any]] = {}
        for name in columns:
            column = batch.column(name)
            if _holds_text(column.type):
                # As bytes, decoded here: a value that is not UTF-8 (a writer
                # that did not check) is that row's problem, not the file's.
                # Arrow casts each text type to large_binary without checking
                # (a dictionary's values looked up, string_view's buffers read).
                data[name] = [
                    None if v is None else v.decode("utf-8", "surrogateescape")
                    for v in column.cast(pa.large_binary()).to_pylist()
                ]
            else:
                data[name] = column.to_pylist()
        for i in range(batch.num_rows):
            yield rows.of({name: values[i] for name, values in data.items()}, row, has_text)
            row += 1


def _csv_records(path: Path) -> Iterator[tuple[int, list[str] | None, list[str] | str]]:
    """Each record after the header, but empty lines, with its 0-based row
    number, as (row, header, fields) or (row, header, why it cannot be read)."""
    csv.field_size_limit(MAX_CSV_FIELD_CHARS)
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        # strict: a malformed record (text after a closing quote, a quote
        # never closed) is a bad row, not merged silently into its field.
        reader = csv.reader(f, strict=True)
        header: list[str] | None = None
        row = 0
        while True:
            try:
                fields: list[str] | str = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                fields = f"not valid CSV: {exc}"
            if header is None:
                header = fields if isinstance(fields, list) else []
                continue
            if fields == []:
                continue  # an empty line, which csv.DictReader skips too
            yield row, header, fields
            row += 1


def _csv_rows(rows: _Rows) -> Iterator[Row]:
    for row, header, fields in _csv_records(rows.path):
        if isinstance(fields, str):
            yield rows.bad(row, fields)
        else:
            # A record shorter than the header has no value for the columns it lacks.
            yield rows.of(dict(zip(header or [], fields)), row, rows.text_column in (header or []))


_READERS = {"jsonl": _jsonl_rows, "parquet": _parquet_rows, "csv": _csv_rows}


def read_rows(
    files: list[Path],
    id_column: str = "id",
    text_column: str = "text",
    base: Path | None = None,
) -> Iterator[Row]:
    """Every row of every file, in order. A row without an id is
    ``FILE:ROW``, FILE its path from ``base`` (:func:`id_base` of the job's
    inputs), or its name when no base is given."""
    for path in files:
        yield from _READERS[FORMATS[path.suffix.lower()]](_Rows(path, base, id_column, text_column))


def count_rows(files: list[Path]) -> int:
    """The number of rows :func:`read_rows` gives, cheaply where it can be
    (Parquet's metadata, JSONL's lines), for progress and Ray's offsets."""
    total = 0
    for path in files:
        kind = FORMATS[path.suffix.lower()]
        if kind == "parquet":
            import pyarrow.parquet as pq

            total += pq.ParquetFile(path).metadata.num_rows
        elif kind == "csv":
            total += sum(1 for _ in _csv_records(path))
        else:
            total += sum(1 for _ in _jsonl_lines(path))
    return total


def check_text(value: object) -> str | None:
    """Why ``value`` is not a text to embed, or None when it is one."""
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        return f"the text is {kind}, not a string"
    if not value.strip():
        return "the text is empty"
    if _SURROGATE.search(value):
        return f"the text holds {_not_unicode(value)}"
    return None
