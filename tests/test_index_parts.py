"""The index job's parts that need no engine: reading, sharding, the output folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin import OutputMismatch
from bge_m3_sparse_plugin.index._job import DUPLICATE_ID, Vector, collect
from bge_m3_sparse_plugin.index._local import shards_of
from bge_m3_sparse_plugin.index._output import (
    ERRORS,
    Manifest,
    ShardRows,
    append_errors,
    keep_errors,
    read_errors,
    write_shard,
)
from bge_m3_sparse_plugin.index._reader import (
    Row,
    check_text,
    count_rows,
    id_base,
    read_rows,
    resolve_inputs,
)

from .support.corpus import index_cmd, run


def rows_of(path: Path, **kw) -> list[tuple]:
    return [(r.id, r.text, r.row, r.problem) for r in read_rows([path], **kw)]


def test_jsonl_rows_keep_ids_and_report_unreadable_lines(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'{"id": 7, "text": "a"}\n\n{"text": "no id"}\n{"id": "x", "body": "b"}\n'
        b'not json\n[1, 2]\n{"id": "bad", "text": "\xff"}\n'
    )
    assert rows_of(path) == [
        ("7", "a", 0, None),
        ("docs.jsonl:2", "no id", 2, None),
        ("x", None, 3, "no 'text' field"),
        ("docs.jsonl:4", None, 4, "not valid JSON: Expecting value"),
        ("docs.jsonl:5", None, 5, "a JSON list, not an object"),
        ("docs.jsonl:6", None, 6, "undecodable bytes: invalid start byte at byte 23"),
    ]
    assert count_rows([path]) == 6


def test_csv_rows_with_quoted_newlines_and_other_columns(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_bytes(b'id,text\n1,"one, with a comma"\n2,"two\nlines"\n,no id\n3,caf\xe9\n')
    assert rows_of(path) == [
        ("1", "one, with a comma", 0, None),
        ("2", "two\nlines", 1, None),
        ("docs.csv:2", "no id", 2, None),
        ("3", None, 3, "the 'text' holds bytes that are not UTF-8 (0xe9 at character 3)"),
    ]
    assert count_rows([path]) == 4
    assert rows_of(path, text_column="body")[0] == ("1", None, 0, "no 'body' column")


def test_csv_quotes_inside_fields_are_read_as_the_csv_module_reads_them(tmp_path):
    """Unquoted fields holding a quote (inches): every row read, none joined."""
    path = tmp_path / "screens.csv"
    path.write_bytes(b'id,text\n1,a 5" screen\n2,a 10" screen\n3,plain\n')
    assert rows_of(path) == [
        ("1", 'a 5" screen', 0, None),
        ("2", 'a 10" screen', 1, None),
        ("3", "plain", 2, None),
    ]
    assert count_rows([path]) == 3


def test_csv_with_a_bom_crlf_doubled_quotes_and_a_short_row(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(
        b'\xef\xbb\xbfid,text,extra\r\n1,"say ""hi""\r\nthen go",x\r\n\r\n2\r\n3,"",y\r\n'
    )
    assert rows_of(path) == [
        ("1", 'say "hi"\r\nthen go', 0, None),
        ("2", None, 1, "no 'text' field"),
        ("3", "", 2, None),
    ]
    assert count_rows([path]) == 3


def test_a_malformed_csv_record_is_a_bad_row_and_reading_goes_on(tmp_path):
    """Text after a closing quote: that row is bad, the next one is read. A
    quote never closed: the rest of the file is one bad row, not one text."""
    path = tmp_path / "bad.csv"
    path.write_bytes(b'id,text\n1,"quoted"tail\n2,ok\n3,"never closed\n4,swallowed\n')
    assert rows_of(path) == [
        ("bad.csv:0", None, 0, "not valid CSV: ',' expected after '\"'"),
        ("2", "ok", 1, None),
        ("bad.csv:2", None, 2, "not valid CSV: unexpected end of data"),
    ]
    assert count_rows([path]) == 3


def test_a_csv_field_is_read_at_the_limit_and_a_bad_row_one_past_it(tmp_path):
    """MAX_CSV_FIELD_CHARS characters are a text; one more makes that row bad,
    and the next row is read."""
    limit = 16_777_216  # 2**24, written out: the bound the docstring names
    path = tmp_path / "long.csv"
    path.write_text(f"id,text\nat,{'x' * limit}\npast,{'x' * (limit + 1)}\nafter,ok\n")
    rows = list(read_rows([path]))
    assert [(r.id, r.row, r.problem) for r in rows] == [
        ("at", 0, None),
        ("long.csv:1", 1, f"not valid CSV: field larger than field limit ({limit})"),
        ("after", 2, None),
    ]
    assert len(rows[0].text) == limit
    assert count_rows([path]) == 3


def test_a_csv_row_of_whitespace_or_an_empty_quoted_field_is_a_row(tmp_path):
    """Only an empty line is not a row (as csv.DictReader skips it): a row
    whose text is blank is a row, whose empty text is then reported."""
    path = tmp_path / "t.csv"
    path.write_bytes(b'text\r\n  \r\n\r\n""\r\nok\r\n')
    assert rows_of(path) == [
        ("t.csv:0", "  ", 0, None),
        ("t.csv:1", "", 1, None),
        ("t.csv:2", "ok", 2, None),
    ]
    assert count_rows([path]) == 3


def test_jsonl_with_a_bom_crlf_and_lone_surrogates(tmp_path):
    """A BOM is not a bad first row; a lone surrogate (a JSON escape) makes a
    bad row: in the text, under the row's id; in the id, under FILE:ROW."""
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"id": "a", "text": "first"}\r\n'
        b'{"id": "b", "text": "half \\ud83d of an emoji"}\r\n'
        b'{"id": "\\udfff", "text": "fine"}\r\n'
    )
    rows = list(read_rows([path]))
    surrogate = "a lone surrogate (U+{} at character {}), not Unicode text"
    assert [(r.id, r.text, r.row, r.problem) for r in rows] == [
        ("a", "first", 0, None),
        ("b", None, 1, "the 'text' holds " + surrogate.format("D83D", 5)),
        ("docs.jsonl:2", None, 2, "the 'id' holds " + surrogate.format("DFFF", 0)),
    ]
    assert check_text("half \ud83d") == "the text holds " + surrogate.format("D83D", 5)
    assert count_rows([path]) == 3


def test_rows_without_ids_are_named_by_their_path_from_the_inputs_folder(tmp_path):
    """Two files of one name in two folders: distinct ids; one file: its name."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "data.jsonl").write_text('{"text": "x"}\n{"text": "y"}\n')
    files = resolve_inputs([str(tmp_path)])
    assert [r.id for r in read_rows(files, base=id_base(files))] == [
        "a/data.jsonl:0",
        "a/data.jsonl:1",
        "b/data.jsonl:0",
        "b/data.jsonl:1",
    ]
    one = [tmp_path / "b" / "data.jsonl"]
    assert [r.id for r in read_rows(one, base=id_base(one))] == ["data.jsonl:0", "data.jsonl:1"]


def test_the_jobs_own_output_is_never_an_input(tmp_path):
    """OUTPUT inside an INPUT folder: its shards, manifest and error log are
    skipped by the folder and by a glob; a file of it named alone is refused."""
    (tmp_path / "data.jsonl").write_text('{"text": "x"}\n')
    out = tmp_path / "vectors"
    out.mkdir()
    for name in ("part-00000.parquet", "_manifest.json", "_errors.jsonl"):
        (out / name).write_text("")
    assert resolve_inputs([str(tmp_path)], out) == [tmp_path / "data.jsonl"]
    assert resolve_inputs([str(tmp_path / "**" / "*.json*")], out) == [tmp_path / "data.jsonl"]
    with pytest.raises(ValueError, match="a file of the output folder cannot be an input"):
        resolve_inputs([str(out / "_errors.jsonl")], out)
    with pytest.raises(ValueError, match="this is the output folder"):
        resolve_inputs([str(out)], out)


def test_parquet_rows_and_a_missing_text_column(tmp_path):
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", None], "text": ["x", None]}), path)
    assert rows_of(path) == [("a", "x", 0, None), ("docs.parquet:1", None, 1, None)]
    # A string column that is not UTF-8 (a writer that did not check): that row only.
    raw = tmp_path / "raw.parquet"
    texts = pa.array([b"ok", b"caf\xe9", b"fine"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts}), raw)
    assert rows_of(raw) == [
        ("raw.parquet:0", "ok", 0, None),
        (
            "raw.parquet:1",
            None,
            1,
            "the 'text' holds bytes that are not UTF-8 (0xe9 at character 3)",
        ),
        ("raw.parquet:2", "fine", 2, None),
    ]
    assert rows_of(path, text_column="body") == [
        ("a", None, 0, "no 'body' column"),
        ("docs.parquet:1", None, 1, "no 'body' column"),
    ]
    assert count_rows([path]) == 2


# Every Arrow type a text column can have, each made from bytes without a
# UTF-8 check (as a writer that did not check makes it).
ARROW_TEXT_TYPES = {
    "string": lambda b: pa.array(b, pa.binary()).view(pa.string()),
    "large_string": lambda b: pa.array(b, pa.large_binary()).view(pa.large_string()),
    "string_view": lambda b: pa.array(b, pa.binary_view()).view(pa.string_view()),
    "binary": lambda b: pa.array(b, pa.binary()),
    "large_binary": lambda b: pa.array(b, pa.large_binary()),
    # pandas' categoricals: each distinct value once, rows as indices
    "dictionary": lambda b: pa.array(b, pa.binary()).view(pa.string()).dictionary_encode(),
}


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(ARROW_TEXT_TYPES)),
    values=st.lists(
        st.one_of(
            st.none(),
            st.text(alphabet="abc xyz", min_size=1, max_size=6).map(str.encode),
            st.binary(min_size=1, max_size=6),  # often not UTF-8
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_a_parquet_text_column_of_any_arrow_type_gives_each_row_its_own_verdict(
    tmp_path_factory, kind, values
):
    """Bytes that are not UTF-8 make a bad row of their row alone, whatever the
    column's Arrow type; every other row is read as the same column of
    Python strings is, and the file is read to its end."""
    from bge_m3_sparse_plugin.index._reader import check_text

    path = tmp_path_factory.mktemp("arrow") / "docs.parquet"
    pq.write_table(pa.table({"text": ARROW_TEXT_TYPES[kind](values)}), path)
    got = rows_of(path)
    want = []
    for row, raw in enumerate(values):
        text = None if raw is None else raw.decode("utf-8", "surrogateescape")
        why = check_text(text) if text is not None else None
        bad = why is not None and "not UTF-8" in why
        reason = why.replace("the text", "the 'text'", 1) if bad else None
        want.append((f"docs.parquet:{row}", None if bad else text, row, reason))
    assert got == want


def test_inputs_from_folders_globs_and_files_in_a_stable_order(tmp_path):
    for name in ("b.jsonl", "a.csv", "sub/c.parquet", "notes.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert [p.name for p in resolve_inputs([str(tmp_path)])] == ["a.csv", "b.jsonl", "c.parquet"]
    assert [p.name for p in resolve_inputs([str(tmp_path / "*.jsonl")])] == ["b.jsonl"]
    with pytest.raises(ValueError, match=r"unknown format '\.txt'"):
        resolve_inputs([str(tmp_path / "notes.txt")])
    with pytest.raises(ValueError, match="no such file, folder or glob match"):
        resolve_inputs([str(tmp_path / "missing.jsonl")])


@pytest.mark.parametrize(
    "value,reason",
    [
        ("ok", None),
        ("", "the text is empty"),
        ("  \n", "the text is empty"),
        (3, "the text is int, not a string"),
        (None, "the text is null, not a string"),
        (["a"], "the text is list, not a string"),
        (1.5, "the text is float, not a string"),
    ],
)
def test_check_text(value, reason):
    assert check_text(value) == reason


def test_shards_are_consecutive_rows_of_fixed_size():
    rows = iter([Row(str(i), "t", "f", i) for i in range(7)])
    assert [(i, [r.row for r in chunk]) for i, chunk in shards_of(rows, 3)] == [
        (0, [0, 1, 2]),
        (1, [3, 4, 5]),
        (2, [6]),
    ]


def test_manifest_refuses_another_job_and_ignores_versions(tmp_path):
    job = {"model": "m", "top_k": None, "plugin_version": "0.1.0", "vllm_version": "0.32.0"}
    manifest = Manifest.open(tmp_path, job)
    manifest.shards["part-00000.parquet"] = {"rows": 3, "documents": 2, "errors": 1, "tokens": 9}
    manifest.save(tmp_path)
    again = Manifest.open(tmp_path, {**job, "plugin_version": "0.2.0", "vllm_version": "0.33.1"})
    assert again.shards == manifest.shards
    assert again.totals() == {"rows": 3, "documents": 2, "errors": 1, "tokens": 9}
    with pytest.raises(OutputMismatch) as info:
        Manifest.open(tmp_path, {**job, "top_k": 5, "model": "other"})
    message = str(info.value)
    assert "model: 'm' there, 'other' now; top_k: None there, 5 now" in message
    assert f"rm -r {tmp_path}" in message


def test_errors_of_unfinished_shards_are_dropped_on_resume(tmp_path):
    append_errors(tmp_path, [{"id": "a", "shard": "part-00000.parquet"}])
    append_errors(tmp_path, [{"id": "b", "shard": "part-00001.parquet"}])
    keep_errors(tmp_path, ["part-00000.parquet"])
    assert read_errors(tmp_path) == [{"id": "a", "shard": "part-00000.parquet"}]
    assert (tmp_path / ERRORS).read_text() == json.dumps(
        {"id": "a", "shard": "part-00000.parquet"}
    ) + "\n"


def test_a_torn_last_line_of_the_error_log_is_dropped_and_the_log_goes_on(tmp_path):
    """A crash in the middle of append_errors leaves half a line: later runs
    read the log, drop that line, and append after it cleanly."""
    append_errors(tmp_path, [{"id": "a", "shard": "part-00000.parquet"}])
    with open(tmp_path / ERRORS, "a") as f:
        f.write('{"id": "b", "sha')
    assert read_errors(tmp_path) == [{"id": "a", "shard": "part-00000.parquet"}]
    keep_errors(tmp_path, ["part-00000.parquet"])
    append_errors(tmp_path, [{"id": "c", "shard": "part-00001.parquet"}])
    assert read_errors(tmp_path) == [
        {"id": "a", "shard": "part-00000.parquet"},
        {"id": "c", "shard": "part-00001.parquet"},
    ]


def test_a_file_edited_in_place_to_the_same_size_is_another_jobs_input(tmp_path):
    """Size and modification time, as make and rsync compare: the refusal names the file."""
    job = {
        "model": "m",
        "inputs": ["/data/a.jsonl", "/data/b.jsonl"],
        "input_sizes": [10, 20],
        "input_mtimes": [1_700_000_000_000_000_000, 1_700_000_000_000_000_000],
    }
    Manifest.open(tmp_path, job).save(tmp_path)
    edited = {**job, "input_mtimes": [1_700_000_000_000_000_000, 1_700_000_000_500_000_000]}
    with pytest.raises(OutputMismatch) as info:
        Manifest.open(tmp_path, edited)
    assert str(info.value) == (
        f"{tmp_path} holds the output of another job (/data/b.jsonl changed since it was read: "
        "size 20 then, 20 now, modified 2023-11-14T22:13:20.000000Z then, "
        "2023-11-14T22:13:20.500000Z now). Its shards hold what the inputs held then; to index "
        f"them as they are now, start fresh: remove the folder (rm -r {tmp_path}) or give "
        "another OUTPUT"
    )


def test_an_output_of_another_format_is_refused_not_resumed(tmp_path):
    """Format 1 read CSV by hand and named rows by their file's name alone:
    its shards may hold other rows and ids than this version writes."""
    job = {"model": "m", "top_k": None}
    body = {"format": 1, "job": job, "shards": {"part-00000.parquet": {"rows": 3}}}
    (tmp_path / "_manifest.json").write_text(json.dumps(body))
    with pytest.raises(OutputMismatch, match="holds output of format 1, written by another"):
        Manifest.open(tmp_path, job)
    assert json.loads((tmp_path / "_manifest.json").read_text()) == body


def _vector(n: int) -> Vector:
    return Vector(num_tokens=n, indices=[n], values=[1.0])


def test_a_duplicate_id_is_reported_and_the_first_row_kept():
    """Within a shard and against the ids indexed before (earlier shards and
    runs); a bad row does not claim its id."""
    names = ["a", "b", "a", "c", "c", "old", "b"]
    rows = [Row(i, "t", "f.jsonl", n) for n, i in enumerate(names)]
    results: list = [_vector(n) for n in range(len(names))]
    results[1] = "the text is empty"
    ids = {"old"}
    shard, errors = collect(rows, results, "part-00001.parquet", False, ids)
    assert (shard.ids, shard.num_tokens) == (["a", "c", "b"], [0, 3, 6])
    assert [(e["id"], e["row"], e["reason"]) for e in errors] == [
        ("b", 1, "the text is empty"),
        ("a", 2, DUPLICATE_ID),
        ("c", 4, DUPLICATE_ID),
        ("old", 5, DUPLICATE_ID),
    ]
    assert ids == {"old", "a", "b", "c"}


def test_shard_columns_and_types(tmp_path):
    rows = ShardRows(
        ids=["a"], indices=[[3, 1]], values=[[0.5, 0.25]], num_tokens=[4], dense=[[0.1, 0.2]]
    )
    write_shard(tmp_path, "part-00000.parquet", rows, dense_size=2)
    table = pq.read_table(tmp_path / "part-00000.parquet")
    assert table.schema == pa.schema(
        [
            ("id", pa.string()),
            ("indices", pa.list_(pa.int32())),
            ("values", pa.list_(pa.float32())),
            ("num_tokens", pa.int32()),
            ("dense", pa.list_(pa.float32(), 2)),
        ]
    )
    assert table.to_pylist() == [
        {
            "id": "a",
            "indices": [3, 1],
            "values": [0.5, 0.25],
            "num_tokens": 4,
            "dense": pytest.approx([0.1, 0.2]),
        }
    ]
    assert not list(tmp_path.glob("*.tmp"))


# -- a module that is missing, against one that is installed and broken -------


def _run_with(site: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -c`` with ``site`` first on the path (its sitecustomize runs first)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
    )


def _site_where(tmp_path: Path, module: str, state: str, error: str) -> Path:
    """A folder to put first on the path, where ``module`` is absent (None in
    sys.modules, through its sitecustomize) or broken (a package whose import
    raises ``error``)."""
    site = tmp_path / "site"
    site.mkdir()
    if state == "absent":
        (site / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    else:
        (site / module).mkdir()
        (site / module / "__init__.py").write_text(f"raise ImportError({error!r})\n")
    return site


@pytest.mark.parametrize("state", ["absent", "broken"])
def test_index_ray_says_whether_ray_is_missing_or_broken(tmp_path, state):
    error = "libarrow.so.2000: cannot open shared object file"
    site = _site_where(tmp_path, "ray", state, error)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "text": "x"}\n')
    result = _run_with(
        site, "-m", "bge_m3_sparse_plugin", "index", str(rows), str(tmp_path / "out"),
        "--model", str(tmp_path), "--ray",
    )  # fmt: skip
    assert result.returncode == 2
    said = result.stderr.strip().splitlines()[-1]
    if state == "absent":
        assert said.startswith("bge-m3-sparse index: --ray needs Ray Data (")
        assert said.endswith(
            "): pip install '.[ray]' in the plugin's checkout "
            "(after a release: pip install 'bge-m3-sparse-plugin[ray]')"
        )
    else:
        assert said == (
            "bge-m3-sparse index: --ray: Ray Data is installed but fails to import: "
            f"ImportError: {error}"
        )


@pytest.mark.parametrize("state", ["absent", "broken"])
def test_the_engine_runs_on_the_cpu_only_when_torch_is_absent(tmp_path, state):
    error = "libtorch_cpu.so: cannot open shared object file"
    site = _site_where(tmp_path, "torch", state, error)
    code = "from bge_m3_sparse_plugin.index._model_info import on_gpu; print(on_gpu())"
    result = _run_with(site, "-c", code)
    if state == "absent":
        assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr
    else:
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == f"ImportError: {error}"


def test_the_models_sizes_come_from_its_config_without_importing_torch(model_dir):
    """The command's process reads the dense and sparse sizes; on --ray it
    never needs torch, which AutoConfig would import (about 9 s of CPU)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    code = (
        "import sys; from bge_m3_sparse_plugin.index._model_info import hidden_size, vocab_size; "
        f"print(hidden_size({str(model_dir)!r}), vocab_size({str(model_dir)!r}), "
        "'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(config.hidden_size), str(config.vocab_size), "False"]


def test_the_progress_bars_last_frame_shows_the_summarys_figures(capsys):
    """The bar and the summary print one speed: the summary's, from its counts
    and its time (the bar's own rate would count the skipped rows, and the
    engine's shutdown)."""
    from bge_m3_sparse_plugin.index._command import ProgressBar, print_summary
    from bge_m3_sparse_plugin.index._job import Summary

    progress = ProgressBar(total=300, enabled=True)
    progress.skip(100)
    progress.start()
    summary = Summary(documents=150, rows=200, tokens=6000, seconds=2.5, shards_done=2)
    progress.advance(200, summary)
    progress.bar.refresh()  # drawn at once (tqdm draws at most every 0.1 s)
    progress.close(summary)
    frames = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()
    # While it runs: the rows, and the speeds counted from the summary's counts.
    running = [f for f in frames if "| 300/300 rows [00:" in f]
    assert running and all(f.rstrip().endswith(" tokens/s]") for f in running), frames
    assert frames[-1].endswith("| 300/300 rows [2.5 s, 60.0 documents/s, 2,400 tokens/s]"), frames
    summary.totals = {"documents": 150, "errors": 0}
    print_summary(summary, Path("out"))
    assert "in 2.5 s: 60.0 documents/s, 2,400 tokens/s;" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("limit", "batch", "refused"),
    [(None, 1024, False), (None, 1025, True), ("8", 8, False), ("8", 9, True)],
)
def test_the_batch_size_cap_is_the_servers_max_inputs(monkeypatch, capsys, limit, batch, refused):
    """--batch-size is capped by BGE_M3_SPARSE_MAX_INPUTS, as the plugin's
    requests are, and as the adapters' batch_size is."""
    from bge_m3_sparse_plugin._cli import build_parser
    from bge_m3_sparse_plugin.index._command import check_arguments
    from bge_m3_sparse_plugin.integrations._remote import Remote

    if limit is not None:
        monkeypatch.setenv("BGE_M3_SPARSE_MAX_INPUTS", limit)
    parser = build_parser()
    args = parser.parse_args(
        ["index", "in.jsonl", "out", "--model", "m", "--batch-size", str(batch)]
    )
    if refused:
        with pytest.raises(SystemExit):
            check_arguments(args, args.parser)
        cap = limit or "1024"
        assert (
            f"--batch-size must be <= {cap} (the plugin's inputs per request, BGE_M3_SPARSE_MAX_INPUTS), got {batch}"
            in capsys.readouterr().err
        )
        with pytest.raises(ValueError, match=f"batch_size must be 1 to {cap} "):
            Remote(batch_size=batch)
    else:
        check_arguments(args, args.parser)
        assert Remote(batch_size=batch).batch_size == batch


@settings(max_examples=60, deadline=None)
@given(
    value=st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, -1e-300])
)
def test_min_weight_is_checked_by_the_request_schemas_own_definition(value):
    """The command refuses exactly the --min-weight values the plugin's
    request refuses (nan, inf, negatives), so none starts an engine and then dies."""
    from pydantic import ValidationError

    from bge_m3_sparse_plugin._cli import build_parser
    from bge_m3_sparse_plugin.index._command import check_arguments
    from bge_m3_sparse_plugin.schemas import SparseEmbeddingRequest

    try:
        SparseEmbeddingRequest.model_validate({"input": "a", "min_weight": value})
        valid = True
    except ValidationError:
        valid = False
    parser = build_parser()
    args = parser.parse_args(
        ["index", "in.jsonl", "out", "--model", "m", f"--min-weight={value!r}"]
    )
    if valid:
        check_arguments(args, args.parser)
    else:
        with pytest.raises(SystemExit) as refused:
            check_arguments(args, args.parser)
        assert refused.value.code == 2


@pytest.mark.parametrize("under", [False, True])
def test_an_output_that_is_a_file_is_a_one_line_refusal(tmp_path, under):
    """OUTPUT an existing file, or a path under one: exit 2 with one line that
    names OUTPUT, before the model is even looked for (no engine starts)."""
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "a text"}\n')
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    output = afile / "vectors" if under else afile
    done = run(index_cmd(tmp_path / "no-such-model", corpus, output))
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and f"OUTPUT {str(output)!r}" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and "--model" not in errors[0]
    assert afile.read_text() == "mine\n"
