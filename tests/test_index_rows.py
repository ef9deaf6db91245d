"""Every input row is in the shards once or in ``_errors.jsonl``, whatever the files hold.

Hypothesis writes JSONL, CSV and Parquet files as other tools write them:
quotes inside fields, newlines in quoted fields, a BOM, CRLF, bytes that are
not UTF-8, lone surrogates, empty and blank rows, missing columns, duplicate
and missing ids; in folders whose files share a name. The job runs on them
with a real engine (the session's ``LLM``), once straight through and once
stopped after some shards and resumed, and the test checks, from what it
wrote and the rules of docs/index.md alone:

- each row is in the shards (under its id) or in the error log (by file and
  row), never both and never neither; the first good row of an id is the
  one indexed, a later one is reported;
- an indexed row holds its own text's vectors (its tokens, counted by the
  model's tokenizer);
- the progress total is the number of rows written, and the bar ends on it;
- the resumed output equals the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin.index._engine import Encoder
from bge_m3_sparse_plugin.index._job import Summary, run_job
from bge_m3_sparse_plugin.index._local import LocalBackend
from bge_m3_sparse_plugin.index._output import read_errors
from bge_m3_sparse_plugin.index._reader import count_rows, resolve_inputs

from .support.corpus import job_of

pytestmark = pytest.mark.engine

# Text of every kind the files must carry: quotes, commas, newlines, CR,
# tabs, accents, an emoji, and whitespace alone.
ALPHABET = st.sampled_from([*"ab cd,\"'\n\r\t;é€😀x", "word", "  ", '""'])
TEXTS = st.lists(ALPHABET, max_size=12).map("".join)
IDS = st.one_of(st.none(), st.sampled_from(["a", "b", "dup", "x1", "Z"]))
BAD = "\x00BAD\x00"  # stands for bytes that are not UTF-8, where a writer puts them


@dataclass
class Written:
    """One row as the test wrote it: the id it gave (None: none), and whether
    its text is a text to embed by docs/index.md's rules."""

    file: Path
    row: int
    id: str | None
    good: bool
    text: str | None


def _good(text: Any) -> bool:
    """A string, not only whitespace, and Unicode (no lone surrogate)."""
    return (
        isinstance(text, str)
        and bool(text.strip())
        and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
        and BAD not in text
    )


# -- writers: each returns the rows it wrote, in order ---------------------------


@st.composite
def jsonl_file(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]]]:
    """Lines of JSON objects (with blank lines, lines that are not JSON, bytes
    that are not UTF-8, a BOM, CRLF), and each row's id and text."""
    kinds = ["text"] * 3 + ["surrogate", "bytes", "null", "number", "no-text"]
    kinds += ["not-json", "array", "blank", "bad-id"]
    lines: list[bytes] = []
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 9))):
        kind, row_id, text = draw(st.sampled_from(kinds)), draw(IDS), draw(TEXTS)
        if kind == "blank":  # not a row
            lines.append(draw(st.sampled_from([b"", b"  ", b"\t"])))
            continue
        if kind in ("not-json", "array"):  # a row without an id: FILE:ROW
            lines.append(b"{not json" if kind == "not-json" else b"[1, 2]")
            rows.append({"row": len(lines) - 1, "id": None, "text": None, "good": False})
            continue
        record: dict[str, Any] = {} if row_id is None else {"id": row_id}
        if kind == "bad-id":
            record["id"], row_id = "\ud800", None  # reported as FILE:ROW
        if kind != "no-text":
            record["text"] = {"surrogate": text + "\udc00", "null": None, "number": 42}.get(
                kind, text
            )
        ascii_only = kind in ("surrogate", "bad-id") or draw(st.booleans())
        line = json.dumps(record, ensure_ascii=ascii_only).encode()
        if kind == "bytes":  # the line cannot be decoded: its id is not read
            line = json.dumps({**record, "text": "caf" + BAD}).encode()
            line = line.replace(json.dumps(BAD)[1:-1].encode(), b"\xe9\xff")
            row_id = None
        rows.append(
            {
                "row": len(lines),  # a JSONL row is its line: blank lines count
                "id": row_id,
                "text": record.get("text"),
                "good": kind == "text" and _good(text),
            }
        )
        lines.append(line)
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    body = newline.join(lines) + (newline if lines and draw(st.booleans()) else b"")
    return (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + body, rows


@st.composite
def csv_file(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]]]:
    """Written by Python's csv module, as a spreadsheet would: a header, any
    quoting, CRLF or LF, a BOM, empty lines, bytes that are not UTF-8 in a
    field, rows shorter than the header."""
    header = draw(st.sampled_from([["id", "text"], ["text", "id"], ["text"], ["id", "text", "n"]]))
    quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]))
    newline = draw(st.sampled_from(["\r\n", "\n"]))
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=quoting, lineterminator=newline)
    writer.writerow(header)
    rows: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 9))):
        kind = draw(st.sampled_from(["text", "text", "text", "bytes", "empty-line", "short"]))
        if kind == "empty-line":
            buffer.write(newline)
            continue
        row_id = draw(IDS)
        text = draw(TEXTS) if kind != "bytes" else "caf" + BAD
        if newline == "\n":
            # The csv module leaves a lone CR unquoted under LF line ends, and
            # then reads it back as a line end: that file says something else.
            text = text.replace("\r", "")
        values = {"id": row_id or "", "text": text, "n": "7"}
        fields = [values[c] for c in header]
        if kind == "short" and header[0] == "id":
            fields = fields[:1]
            text = None
        writer.writerow(fields)
        rows.append(
            {
                "row": len(rows),  # a CSV row: a record after the header
                "id": row_id if "id" in header else None,
                "text": text,
                "good": kind != "bytes" and _good(text),
            }
        )
    body = buffer.getvalue().encode("utf-8").replace(BAD.encode(), b"\xe9\xff")
    bom = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    return bom + body, rows


@st.composite
def parquet_file(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]]]:
    """A table with an id column or none, a text column or none, nulls, and
    strings that are not UTF-8 (a writer that did not check)."""
    n = draw(st.integers(0, 9))
    has_id, has_text = draw(st.booleans()), draw(st.integers(0, 5)) > 0
    ids = [draw(IDS) for _ in range(n)]
    kinds = [draw(st.sampled_from(["text", "text", "null", "bytes"])) for _ in range(n)]
    texts: list[str | None] = [
        None if k == "null" else "caf" + BAD if k == "bytes" else draw(TEXTS) for k in kinds
    ]
    columns: dict[str, Any] = {}
    if has_id:
        columns["id"] = pa.array(ids, pa.string())
    if has_text:
        raw = [None if t is None else t.encode().replace(BAD.encode(), b"\xe9\xff") for t in texts]
        columns["text"] = pa.array(raw, pa.binary()).view(pa.string())
    columns["n"] = pa.array(range(n), pa.int64())
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    rows = [
        {
            "row": i,
            "id": ids[i] if has_id else None,
            "text": texts[i],
            "good": has_text and kinds[i] == "text" and _good(texts[i]),
        }
        for i in range(n)
    ]
    return buffer.getvalue(), rows


WRITERS = {"jsonl": jsonl_file, "csv": csv_file, "parquet": parquet_file}


@st.composite
def corpora(draw: st.DrawFn) -> list[tuple[str, str, bytes, list[dict[str, Any]]]]:
    """One to three files, each in a folder of its own, most of one name:
    (folder, file name, bytes, rows)."""
    files = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(sorted(WRITERS)))
        body, rows = draw(WRITERS[kind]())
        files.append((f"d{i}", f"data.{kind}", body, rows))
    return files


# -- the job --------------------------------------------------------------------


class Recorder:
    """The progress bar's calls."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.skipped = 0
        self.advanced: list[int] = []
        self.stop_after = stop_after

    def skip(self, rows: int) -> None:
        self.skipped += rows

    def start(self) -> None:
        pass

    def advance(self, rows: int, summary: Summary) -> None:
        self.advanced.append(rows)
        if self.stop_after is not None and len(self.advanced) >= self.stop_after:
            raise KeyboardInterrupt  # as Ctrl-C after a shard is recorded


def _run(llm: Any, folder: Path, out: Path, progress: Recorder) -> int:
    files = resolve_inputs([str(folder)], out)
    job = job_of("tiny", files, rows_per_shard=3)
    total = count_rows(files)
    backend = LocalBackend(job, files, lambda: Encoder(llm, job.options), batch_size=2)
    run_job(job, out, backend, total, None, progress=progress)
    return total


def _output(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shards = sorted(out.glob("part-*.parquet"))
    rows = pq.read_table(shards).to_pylist() if shards else []
    return rows, read_errors(out)


@pytest.fixture(scope="module")
def engine(llm):
    return llm


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(files=corpora(), stop_after=st.integers(1, 3))
def test_every_row_is_indexed_once_or_reported(engine, tokenizer, files, stop_after):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        written: list[Written] = []
        for folder, name, body, rows in files:
            path = root / "in" / folder / name
            path.parent.mkdir(parents=True)
            path.write_bytes(body)
            written += [Written(path, r["row"], r["id"], r["good"], r["text"]) for r in rows]
        # docs/index.md: a row without an id is FILE:ROW, FILE its path from
        # the folder that holds every input.
        holder = root / "in" if len(files) > 1 else root / "in" / files[0][0]

        def expected_id(w: Written) -> str:
            return w.id or f"{w.file.relative_to(holder).as_posix()}:{w.row}"

        # The rules: a bad row is reported; of the good rows, the first of
        # each id is indexed and a later one reported.
        indexed: dict[str, Written] = {}
        reported: set[tuple[str, int]] = set()
        for w in written:
            if w.good and expected_id(w) not in indexed:
                indexed[expected_id(w)] = w
            else:
                reported.add((str(w.file), w.row))

        progress = Recorder()
        out = root / "out"
        total = _run(engine, root / "in", out, progress)
        shard_rows, errors = _output(out)

        assert total == len(written) == sum(progress.advanced)
        assert sorted(r["id"] for r in shard_rows) == sorted(indexed)
        assert sorted((e["file"], e["row"]) for e in errors) == sorted(reported)
        for e in errors:
            w = next(w for w in written if (str(w.file), w.row) == (e["file"], e["row"]))
            assert e["id"] == expected_id(w)
            if w.good:
                assert e["reason"].startswith("duplicate id"), e
        for r in shard_rows:  # each indexed row holds its own text's vectors
            text = indexed[r["id"]].text
            assert r["num_tokens"] == len(tokenizer(text)["input_ids"]), r["id"]

        # Stopped after some shards (as Ctrl-C after one is recorded), then resumed.
        again = root / "again"
        with contextlib.suppress(KeyboardInterrupt):
            _run(engine, root / "in", again, Recorder(stop_after=stop_after))
        resumed = Recorder()
        _run(engine, root / "in", again, resumed)
        assert resumed.skipped + sum(resumed.advanced) == total
        assert _output(again) == (shard_rows, errors)
