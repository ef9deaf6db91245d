"""`bge-m3-sparse index`, run as a user runs it: a real engine in a subprocess,
a generated corpus in the three input formats, FlagEmbedding as the reference."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .support.corpus import (
    BAD_JSONL_LINES,
    ROWS_PER_SHARD,
    index_cmd,
    job_of,
    read_output,
    run,
    shard_stats,
)

pytestmark = pytest.mark.engine


def test_every_good_row_equals_flagembedding(first_run, corpus, flag_model):
    out, result = first_run
    rows = read_output(out)
    assert set(rows) == set(corpus["good"]), result.stderr[-2000:]
    ids = sorted(rows)
    flag = flag_model.encode(
        [corpus["good"][i] for i in ids], return_sparse=True, max_length=1024, batch_size=32
    )
    for rid, weights in zip(ids, flag["lexical_weights"]):
        row = rows[rid]
        assert row["indices"] == [int(k) for k in weights], rid
        np.testing.assert_allclose(
            row["values"], [float(v) for v in weights.values()], rtol=1e-5, atol=1e-6
        )
    # Not vacuous: the random model gives a short text no weight now and then, not often.
    assert sum(1 for row in rows.values() if row["indices"]) >= 0.9 * len(rows)
    schema = pq.read_schema(next(out.glob("part-*.parquet")))
    assert schema.field("indices").type == pa.list_(pa.int32())
    assert schema.field("values").type == pa.list_(pa.float32())
    assert schema.field("num_tokens").type == pa.int32()
    assert "dense" not in schema.names


def test_num_tokens_are_the_tokenizers(first_run, corpus, tokenizer):
    out, _ = first_run
    rows = read_output(out)
    assert {rid: row["num_tokens"] for rid, row in rows.items()} == {
        rid: len(tokenizer(text)["input_ids"]) for rid, text in corpus["good"].items()
    }


def test_bad_rows_are_listed_and_the_exit_status_says_so(first_run, corpus):
    out, result = first_run
    assert result.returncode == 1, result.stderr[-2000:]
    errors = [json.loads(line) for line in (out / "_errors.jsonl").read_text().splitlines()]
    by_id = {e["id"]: e for e in errors}
    assert len(errors) == len(BAD_JSONL_LINES) == len(by_id)
    bytes_id = f"a.jsonl:{corpus['bytes_row']}"  # undecodable: no id could be read, so file and row
    expected_ids = ["empty", "number", "null", "list", "no-text", bytes_id, "too-long"]
    expected_ids += ["surrogate", "j0"]
    assert sorted(by_id) == sorted(expected_ids)
    for rid, (_, reason) in zip(expected_ids, BAD_JSONL_LINES):
        assert reason in by_id[rid]["reason"], by_id[rid]
        assert by_id[rid]["file"].endswith("a.jsonl")
    assert by_id[bytes_id]["row"] == corpus["bytes_row"]
    assert f"indexed {len(corpus['good'])} documents" in result.stdout
    assert "9 bad rows, listed in" in result.stdout


def test_progress_and_summary(first_run, corpus):
    _, result = first_run
    # The engine's start, the one silent stretch of a run, is said.
    starting = "bge-m3-sparse index: starting vLLM's engine on "
    assert [line for line in result.stderr.splitlines() if line.startswith(starting)], result.stderr
    assert "indexing" in result.stderr and "doc" in result.stderr and "tokens/s" in result.stderr
    shards = -(-corpus["rows"] // ROWS_PER_SHARD)
    assert f"{shards} shards written, 0 already done" in result.stdout


def test_manifest_records_the_job_and_every_shard(first_run, corpus, model_dir):
    out, _ = first_run
    manifest = json.loads((out / "_manifest.json").read_text())
    shards = manifest["shards"]
    assert sorted(shards) == sorted(p.name for p in out.glob("part-*.parquet"))
    assert sum(s["rows"] for s in shards.values()) == corpus["rows"]
    assert sum(s["documents"] for s in shards.values()) == len(corpus["good"])
    job = manifest["job"]
    assert job["model"] == str(model_dir.resolve())
    assert (job["top_k"], job["truncate"], job["dense"], job["rows_per_shard"]) == (
        None,
        None,
        False,
        40,
    )
    assert not list(out.glob("*.tmp"))


def test_rerun_skips_every_shard_and_rewrites_none(first_run, model_dir, corpus):
    out, _ = first_run
    before = shard_stats(out)
    result = run(index_cmd(model_dir, corpus, out, "--allow-errors", "--no-progress"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"0 shards written, {len(before)} already done" in result.stdout
    assert "engine start" not in result.stdout  # a finished job starts no engine
    assert shard_stats(out) == before


def test_other_options_are_refused_and_change_nothing(first_run, model_dir, corpus):
    out, _ = first_run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = run(index_cmd(model_dir, corpus, out, "--top-k", "5"))
    assert result.returncode == 2
    assert "top_k: None there, 5 now" in result.stderr
    assert f"rm -r {out}" in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_killed_run_resumes_without_loss_or_duplicates(first_run, model_dir, corpus, tmp_path):
    out = tmp_path / "vectors"
    proc = subprocess.Popen(
        index_cmd(model_dir, corpus, out, "--no-progress"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    manifest = out / "_manifest.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())["shards"]:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = json.loads(manifest.read_text())["shards"]
    total = -(-corpus["rows"] // ROWS_PER_SHARD)
    assert 1 <= len(done) < total, "the run was not killed part-way"
    kept = {name: stat for name, stat in shard_stats(out).items() if name in done}
    result = run(index_cmd(model_dir, corpus, out, "--allow-errors", "--no-progress"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{total - len(done)} shards written, {len(done)} already done" in result.stdout
    assert {name: stat for name, stat in shard_stats(out).items() if name in done} == kept
    first_out, _ = first_run
    resumed, first = read_output(out), read_output(first_out)
    assert sorted(resumed) == sorted(first)
    for rid, row in first.items():
        assert resumed[rid]["indices"] == row["indices"], rid
        assert resumed[rid]["num_tokens"] == row["num_tokens"], rid
        np.testing.assert_allclose(resumed[rid]["values"], row["values"], rtol=1e-5, atol=1e-6)
    errors = sorted(
        e["id"] for e in map(json.loads, (out / "_errors.jsonl").read_text().splitlines())
    )
    assert errors == sorted(
        e["id"] for e in map(json.loads, (first_out / "_errors.jsonl").read_text().splitlines())
    )


def test_a_run_that_fails_after_the_engine_started_stops_the_engine(model_dir, tmp_path):
    """A sink that fails its first load fails the run after the engine started:
    the engine's processes must be gone when run_job returns (by raising), not
    left to the interpreter's teardown, where vLLM's shutdown could abort."""
    import psutil

    from bge_m3_sparse_plugin.index._engine import Encoder
    from bge_m3_sparse_plugin.index._job import run_job
    from bge_m3_sparse_plugin.index._local import LocalBackend
    from bge_m3_sparse_plugin.index._types import EncodeOptions, EngineSettings

    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(json.dumps({"id": str(i), "text": f"text {i}"}) + "\n" for i in range(5))
    )
    job = job_of(str(model_dir), [rows], rows_per_shard=10)
    made: list[Encoder] = []

    def make_encoder() -> Encoder:
        made.append(Encoder.start(str(model_dir), EncodeOptions(), EngineSettings(dtype="float32")))
        return made[-1]

    class FailingSink:
        """Reached when opened; its server gone by the first load."""

        closed = False

        def upsert(self, rows):
            raise ConnectionRefusedError(
                "[Errno 111] Connection refused: the sink's server is down"
            )

        def finish(self):
            raise AssertionError("finish() after a shard failed to load")

        def close(self):
            FailingSink.closed = True

    def engine_processes() -> set[int]:
        """This process's children that vLLM names (VLLM::EngineCore, VLLM::Worker), alive."""
        found = set()
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE and " ".join(
                    [child.name(), *child.cmdline()]
                ).startswith("VLLM::"):
                    found.add(child.pid)
            except psutil.NoSuchProcess:
                continue
        return found

    before = engine_processes()  # the session's offline engine may be running
    backend = LocalBackend(job, [rows], make_encoder, 16)
    with pytest.raises(ConnectionRefusedError):
        run_job(job, tmp_path / "out", backend, 5, None, open_sink=FailingSink)
    assert len(made) == 1  # the engine had started
    assert FailingSink.closed
    # Stopped: the engine core at once; its worker notices and exits (on a
    # loaded machine, a moment later). Without the stop, both live on until
    # the interpreter's teardown.
    left = [psutil.Process(pid) for pid in engine_processes() - before]
    _, alive = psutil.wait_procs(left, timeout=30)
    assert alive == []
    # The shard's file was written before the load failed; it is not recorded,
    # so a re-run writes it again.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["part-00000.parquet"]


def test_a_sink_that_cannot_be_opened_stops_the_job_before_any_engine_starts(model_dir, tmp_path):
    from bge_m3_sparse_plugin.index._job import run_job
    from bge_m3_sparse_plugin.index._local import LocalBackend

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "text": "text"}) + "\n")
    job = job_of(str(model_dir), [rows], rows_per_shard=10)
    made = []

    def unreachable_sink():
        raise ConnectionRefusedError("[Errno 111] Connection refused: the sink's server is down")

    backend = LocalBackend(job, [rows], lambda: made.append(1), 16)
    with pytest.raises(ConnectionRefusedError):
        run_job(job, tmp_path / "out", backend, 1, None, open_sink=unreachable_sink)
    assert made == []
    assert not (tmp_path / "out").exists()  # nor is OUTPUT made
