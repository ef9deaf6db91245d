"""`bge-m3-sparse index --ray-address` on a real Ray cluster of two nodes
(two raylets on this machine, one CPU each), with its faults: a replica
SIGKILLed while it works, and the driver SIGKILLed. The cluster is started
and stopped by the module, by PID (tests/support/ray_cluster.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest

from bge_m3_sparse_plugin._config import DEFAULT_CORE_SLOTS
from bge_m3_sparse_plugin.index._ray import claim_core_slot

from .support.corpus import index_cmd, read_output, shard_stats, texts
from .support.postgres import rows_of
from .support.ray_cluster import TwoNodeCluster

pytestmark = pytest.mark.engine

BIG_ROWS = 3000  # about 15 s of work for two one-core replicas: time to kill one
BIG_SHARD = 100


@pytest.fixture(scope="module")
def cluster():
    cluster = TwoNodeCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
    assert not cluster.own_processes()


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("big")
    with open(folder / "docs.jsonl", "w") as f:
        for i, text in enumerate(texts(BIG_ROWS, 7)):
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    return folder


def big_cmd(model_dir: Path, corpus: Path, out: Path, cluster: TwoNodeCluster) -> list[str]:
    return index_cmd(
        model_dir, corpus, out, "--no-progress", *on_cluster(cluster), rows_per_shard=BIG_SHARD
    )


def on_cluster(cluster: TwoNodeCluster) -> list[str]:
    return ["--ray-address", cluster.address, "--replicas", "2", "--cores-per-replica", "1"]


def start_and_wait_for_a_shard(cmd: list[str], cluster: TwoNodeCluster, out: Path):
    proc = subprocess.Popen(
        cmd,
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    manifest = out / "_manifest.json"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())["shards"]:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no shard recorded: {proc.communicate()[1][-3000:]}")


def replicas_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("replicas: "))


def assert_every_row_once(out: Path) -> None:
    rows = read_output(out)  # asserts no id twice
    assert sorted(rows) == sorted(f"d{i}" for i in range(BIG_ROWS))
    assert all(row["num_tokens"] > 0 for row in rows.values())
    manifest = json.loads((out / "_manifest.json").read_text())["shards"]
    assert sorted(manifest) == sorted(shard_stats(out))
    assert sum(record["rows"] for record in manifest.values()) == BIG_ROWS


def test_two_nodes_give_the_single_machine_rows_and_load_postgres(
    cluster, first_run, corpus, model_dir, postgres, tmp_path
):
    """The whole corpus on the two-node cluster, loaded into PostgreSQL from
    the driver: every shard equals the single-machine one, row for row, the
    bad rows too, and the table holds each row once."""
    single, _ = first_run
    out = tmp_path / "vectors"
    result = subprocess.run(
        index_cmd(
            model_dir,
            corpus,
            out,
            "--no-progress",
            *on_cluster(cluster),
            "--sink",
            postgres,
            "--collection",
            "two_nodes",
        ),
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr[-3000:]  # the bad rows, as on one machine
    assert f"connecting to the Ray cluster at {cluster.address}" in result.stderr
    assert "8 shards written, 0 already done" in result.stdout, result.stdout
    assert sorted(shard_stats(out)) == sorted(shard_stats(single))
    for name in sorted(shard_stats(single)):
        got, want = pq.read_table(out / name), pq.read_table(single / name)
        assert got.schema == want.schema
        got_rows, want_rows = got.to_pylist(), want.to_pylist()
        assert [r["id"] for r in got_rows] == [r["id"] for r in want_rows], name
        for g, w in zip(got_rows, want_rows):
            assert (g["indices"], g["num_tokens"]) == (w["indices"], w["num_tokens"]), g["id"]
            np.testing.assert_allclose(g["values"], w["values"], rtol=1e-5, atol=1e-6)
    errors = lambda folder: sorted(  # noqa: E731
        (e["shard"], e["file"], e["row"], e["reason"])
        for e in map(json.loads, (folder / "_errors.jsonl").read_text().splitlines())
    )
    assert errors(out) == errors(single)
    assert (
        json.loads((out / "_manifest.json").read_text())["shards"]
        == json.loads((single / "_manifest.json").read_text())["shards"]
    )
    loaded = rows_of(postgres, "two_nodes")
    want = {rid: dict(zip(r["indices"], r["values"])) for rid, r in read_output(out).items()}
    assert loaded.keys() == want.keys()
    for rid, weights in want.items():
        assert loaded[rid] == pytest.approx(weights, rel=1e-6), rid


@pytest.fixture
def another_job_holds_every_core():
    """Another index job on this machine, under the default name, holds
    every core range while the test runs."""
    held = [claim_core_slot(1, DEFAULT_CORE_SLOTS)[1] for _ in range(os.cpu_count() or 1)]
    yield
    for holder in held:
        if holder is not None:
            holder.close()


def test_a_replica_killed_while_it_works_loses_and_repeats_no_row(
    cluster, big_corpus, model_dir, tmp_path, another_job_holds_every_core
):
    """SIGKILL one replica (its Ray actor's process) once a shard is recorded.
    Ray restarts the actor and retries its batches, so the job finishes by
    itself; had it not, a re-run would. Either way each row is in the shards
    once, no recorded shard is rewritten, the replicas ran on both nodes on
    different cores (claimed under the cluster's own name, whatever another
    job on the machine holds), and the killed replica's vLLM engine is gone too."""
    out = tmp_path / "vectors"
    cmd = big_cmd(model_dir, big_corpus, out, cluster)
    proc = start_and_wait_for_a_shard(cmd, cluster, out)
    done = json.loads((out / "_manifest.json").read_text())["shards"]
    kept = {name: stat for name, stat in shard_stats(out).items() if name in done}
    working = [p for p in cluster.replicas() if "__init__" not in " ".join(p.cmdline())]
    assert working, "no replica at work"
    victim = working[0]
    engine = victim.children(recursive=True)
    victim.send_signal(signal.SIGKILL)
    stdout, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:  # not finished by itself: the same command again finishes it
        rerun = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        stdout = rerun.stdout
    assert_every_row_once(out)
    assert {name: stat for name, stat in shard_stats(out).items() if name in kept} == kept
    _, alive = psutil.wait_procs(engine, timeout=30)
    assert not alive, f"the killed replica's engine processes live on: {alive}"
    placements = replicas_line(stdout)
    assert " on 2 Ray nodes: " in placements, placements
    assert f"pid {victim.pid} " in placements
    # Nodes of one machine: the replicas claimed different cores, none shared.
    cores = {part.split(" cores ")[1] for part in placements.split(": ", 1)[1].split("; ")}
    assert cores == {"0-0", "1-1"}, placements
    assert "SHARED" not in placements


def test_the_driver_killed_then_the_same_command_resumes(cluster, big_corpus, model_dir, tmp_path):
    """SIGKILL the command itself once a shard is recorded: its replicas end
    with it (Ray ends a dead driver's actors), and the same command then does
    the remaining shards only, leaving each row once."""
    out = tmp_path / "vectors"
    cmd = big_cmd(model_dir, big_corpus, out, cluster)
    proc = start_and_wait_for_a_shard(cmd, cluster, out)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    done = json.loads((out / "_manifest.json").read_text())["shards"]
    total = BIG_ROWS // BIG_SHARD
    assert 1 <= len(done) < total, "the run was not killed part-way"
    kept = {name: stat for name, stat in shard_stats(out).items() if name in done}
    deadline = time.monotonic() + 60
    while cluster.replicas() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.replicas(), "the dead driver's replicas live on"
    rerun = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"{total - len(done)} shards written, {len(done)} already done" in rerun.stdout
    assert_every_row_once(out)
    assert {name: stat for name, stat in shard_stats(out).items() if name in kept} == kept
