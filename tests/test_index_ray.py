"""`bge-m3-sparse index --ray`: the same job on a real local Ray cluster
(Ray Data, one replica holding a vllm.LLM with the plugin), checked against
the single-machine run of the same corpus, row for row."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from bge_m3_sparse_plugin._config import cpu_binding
from bge_m3_sparse_plugin.index._ray import (
    Placement,
    RayBackend,
    RaySettings,
    block_bytes,
    claim_core_slot,
    replica_plan,
    start_ray,
)

from .support.corpus import index_cmd, job_of, shard_stats


def _errors(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "_errors.jsonl").read_text().splitlines()]


@pytest.mark.engine
def test_ray_resumes_a_single_machine_output_and_equals_it(first_run, corpus, model_dir, tmp_path):
    """A single-machine output with three shards taken out (one with the bad rows,
    one across two input files, one of the CSV) is finished on Ray: every
    shard then equals the single-machine shard, and the others were not touched."""
    single, first = first_run
    assert first.returncode == 1, first.stderr[-2000:]
    out = tmp_path / "vectors"
    shutil.copytree(single, out)
    manifest = json.loads((out / "_manifest.json").read_text())
    redo = ["part-00001.parquet", "part-00002.parquet", "part-00006.parquet"]
    assert set(redo) <= set(manifest["shards"])
    for name in redo:
        del manifest["shards"][name]
        (out / name).unlink()
    (out / "_manifest.json").write_text(json.dumps(manifest))
    kept = shard_stats(out)
    # Ray writes its session under RAY_TMPDIR and its auth token under ~/.ray:
    # both go to temporary folders (a short one for Ray's socket paths).
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    home = tmp_path / "home"
    home.mkdir()
    real_ray_dir = Path.home() / ".ray"
    had_ray_dir = real_ray_dir.exists()
    env = os.environ | {"RAY_TMPDIR": str(ray_tmp), "HOME": str(home)}
    try:
        import subprocess

        result = subprocess.run(
            # --verbose: the replica's engine logs reach the driver, its binding among them.
            index_cmd(model_dir, corpus, out, "--ray", "--verbose"),
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 1, result.stderr[-3000:]  # the bad rows, as on one machine
    assert "3 shards written, 5 already done" in result.stdout, result.stdout
    assert "starting a local Ray on this machine" in result.stderr
    # The binding the replica's engine really got, as vLLM's CPU worker logs it:
    # the node's first cores_per_replica cores (the default: all of them), none reserved.
    cores = os.cpu_count() or 1
    logged = result.stdout + result.stderr
    assert f"VLLM_CPU_OMP_THREADS_BIND='0-{cores - 1}'" in logged, logged[-3000:]
    assert "reserve_cpu_num=0" in logged
    assert real_ray_dir.exists() == had_ray_dir
    # Shards Ray did not redo are the same files, untouched.
    after = shard_stats(out)
    assert {name: after[name] for name in kept} == kept
    # Every shard equals the single-machine one, row for row, schema included.
    assert sorted(after) == sorted(shard_stats(single))
    for name in redo:
        ray_table, single_table = pq.read_table(out / name), pq.read_table(single / name)
        assert ray_table.num_rows > 0
        assert ray_table.schema == single_table.schema
        ray_rows, single_rows = ray_table.to_pylist(), single_table.to_pylist()
        assert [r["id"] for r in ray_rows] == [r["id"] for r in single_rows], name
        for got, want in zip(ray_rows, single_rows):
            assert got["indices"] == want["indices"], got["id"]
            assert got["num_tokens"] == want["num_tokens"], got["id"]
            # vLLM's CPU kernels are not bitwise batch-invariant: a text batched
            # with other neighbours can differ in the last bit (2.4e-7 seen).
            np.testing.assert_allclose(got["values"], want["values"], rtol=1e-5, atol=1e-6)
    key = lambda e: (e["shard"], e["file"], e["row"])  # noqa: E731
    assert sorted(_errors(out), key=key) == sorted(_errors(single), key=key)
    assert any(e["shard"] in redo for e in _errors(out))  # the bad rows were among the redone
    saved = json.loads((out / "_manifest.json").read_text())
    assert saved["shards"] == json.loads((single / "_manifest.json").read_text())["shards"]


def test_replicas_one_per_gpu_or_one_per_cores_per_replica_cores():
    two_cpu_nodes = [{"CPU": 2.0}, {"CPU": 8.0}]
    assert replica_plan(two_cpu_nodes, RaySettings()) == (1 + 4, {"num_cpus": 2})
    assert replica_plan(two_cpu_nodes, RaySettings(cores_per_replica=1)) == (2 + 8, {"num_cpus": 1})
    assert replica_plan(two_cpu_nodes, RaySettings(replicas=3)) == (3, {"num_cpus": 2})
    gpus = [{"CPU": 16.0, "GPU": 4.0}, {"CPU": 16.0, "GPU": 4.0}]
    assert replica_plan(gpus, RaySettings()) == (8, {"num_gpus": 1, "num_cpus": 1})
    with pytest.raises(ValueError, match="more than the smallest node has"):
        replica_plan(two_cpu_nodes, RaySettings(cores_per_replica=4))


def test_each_cpu_replica_binds_its_slots_cores_and_keeps_none_back():
    assert [cpu_binding(4, first=slot * 4) for slot in (0, 1)] == [
        {
            "VLLM_CPU_OMP_THREADS_BIND": "0-3",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "OMP_NUM_THREADS": "4",
        },
        {
            "VLLM_CPU_OMP_THREADS_BIND": "4-7",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "OMP_NUM_THREADS": "4",
        },
    ]


def test_the_jobs_dataset_keeps_order_and_the_callers_context_is_untouched(tmp_path, monkeypatch):
    """preserve_order is set on the job's dataset only: a caller's other
    datasets keep Ray's process-wide DataContext as it was."""
    import ray
    import ray.data

    from bge_m3_sparse_plugin.index._ray import dataset_for
    from bge_m3_sparse_plugin.index._types import EngineSettings

    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    monkeypatch.setenv("HOME", str(tmp_path))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a", "text": "x"}\n')
    job = job_of("model", [rows], rows_per_shard=10)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    said: list[str] = []
    try:
        before = ray.data.DataContext.get_current().execution_options.preserve_order
        dataset = dataset_for(job, [rows], [1], frozenset(), EngineSettings(), RaySettings(), 8)
        after = ray.data.DataContext.get_current().execution_options.preserve_order
        # A connection the caller made is used as it is, and the command says so.
        start_ray(RaySettings(address="127.0.0.1:1"), said.append)
        assert ray.is_initialized()
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert dataset.context.execution_options.preserve_order is True
    assert after == before is False
    assert said == ["using this process's Ray connection (ray.init was called before)"]
    # Blocks of about one batch (8 rows of this file), not Ray's 128 MiB.
    assert dataset.context.target_max_block_size == block_bytes([rows], [1], 8) < 2**20


def test_replicas_on_one_node_claim_different_cores_until_they_end():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: one slot")
    # A name of the test's own: a replica of a real job may hold the real ones.
    name = f"bge-m3-sparse-test-{os.getpid()}"
    first, holder = claim_core_slot(1, name)
    second, other = claim_core_slot(1, name)
    assert holder is not None and other is not None
    assert first != second
    holder.close()  # a replica that ends frees its cores for the next one
    again, third = claim_core_slot(1, name)
    assert again == first
    for sock in (other, third):
        sock.close()


def test_the_read_tasks_get_absolute_paths(tmp_path, monkeypatch):
    """On an existing cluster (--ray-address) a read task's working folder is
    not the command's: a relative INPUT was FileNotFoundError there (found on
    a two-node cluster started with `ray start`)."""
    from bge_m3_sparse_plugin.index._ray import file_items

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    assert file_items([Path("in/a.jsonl"), Path("in/b.jsonl"), Path("in/c.jsonl")], [3, 0, 2]) == [
        {"path": str(tmp_path / "in" / "a.jsonl"), "offset": 0},
        {"path": str(tmp_path / "in" / "c.jsonl"), "offset": 3},
    ]


def test_when_every_core_range_is_held_a_replica_shares_the_first_and_the_command_says_so(
    capsys,
):
    """Nodes that tell Ray they have more CPUs than the machine: the replica
    that finds no free range binds the first beside another (no holder), and
    the driver warns once and marks it SHARED in the summary."""
    import pyarrow as pa

    name = f"bge-m3-sparse-test-full-{os.getpid()}"
    held = [claim_core_slot(1, name) for _ in range(os.cpu_count() or 1)]
    assert sorted(slot for slot, _ in held) == list(range(os.cpu_count() or 1))
    assert claim_core_slot(1, name) == (0, None)  # none free: the first, and nothing held
    for _, holder in held:
        holder.close()
    backend = RayBackend.__new__(RayBackend)
    backend.placements = {}
    batch = pa.table(
        {
            "node": ["a" * 56, "a" * 56, "b" * 56],
            "pid": [11, 11, 12],
            "cores": ["0-0", "0-0", "0-0"],
            "shared": [False, False, True],
        }
    )
    backend._note_placements(batch)
    backend._note_placements(batch)  # the same replicas again: warned of once
    warned = capsys.readouterr().err.splitlines()
    assert warned == [
        "bge-m3-sparse index: warning: the replica on node bbbbbbbbbbbb pid 12 cores 0-0 "
        "(SHARED with another replica): every range of its machine's cores was held by another "
        "replica, so it binds the first range beside one (give --replicas or --cores-per-replica "
        "so that the replicas fit the machine's cores)"
    ]
    assert backend.describe() == [
        "replicas: 2 on 2 Ray nodes: node aaaaaaaaaaaa pid 11 cores 0-0; "
        "node bbbbbbbbbbbb pid 12 cores 0-0 (SHARED with another replica)"
    ]
    assert Placement("c" * 56, 13, "gpu").describe() == "node cccccccccccc pid 13 a GPU"
