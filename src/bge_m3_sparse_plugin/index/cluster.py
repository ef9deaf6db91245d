"""The index job on Ray Data: the same shards, manifest and resume as on one machine.

The pipeline is ``from_items(files) → map_batches(read) →
map_batches(Replica, concurrency=N) → the driver writes``:

- each input file is read by one task, on the node that runs the command
  (which sees the input paths), with this package's own reader, so
  that ids, bad rows and shard numbers are those of the single-machine path
  (a row's shard is its position in the whole input, over ``rows_per_shard``);
  rows of shards already done are dropped there;
- each :class:`Replica` holds one ``vllm.LLM`` with the plugin, and runs
  :func:`~.job.encode_rows`, the single-machine code, on its batches;
- the driver receives the rows in input order (``preserve_order``) and writes
  each shard once its last row is in, through :class:`~.job.ShardWriter`.

``ray.data.llm`` is not used: its tasks are generate, embed, classify and
score, it sends prompts straight to the engine, and vLLM runs IO-processor
plugins only in ``LLM.encode`` and ``/pooling``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .engine import EncodeOptions, EngineSettings, on_gpu
from .job import Job, ShardWriter, SinkLike, Summary, Vector, collect, open_output
from .output import shard_name
from .reader import Row, check_text, read_rows

__all__ = ["RaySettings", "replica_plan", "run_job_on_ray"]


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: start a local Ray on this machine
    replicas: int | None = None  # None: one per GPU, or one per node on CPUs
    cores_per_replica: int | None = None  # CPU only; None: the smallest node's CPUs
    log_to_driver: bool = False  # the replicas' vLLM logs, on the driver's terminal


def replica_plan(
    nodes: list[dict[str, float]], settings: RaySettings
) -> tuple[int, dict[str, float]]:
    """How many replicas, and what each asks Ray for, from the alive nodes'
    resources (``ray.nodes()[i]["Resources"]``). Pure: tested without Ray."""
    gpus = sum(int(node.get("GPU", 0)) for node in nodes)
    if gpus:
        return settings.replicas or gpus, {"num_gpus": 1, "num_cpus": 1}
    smallest = min(int(node.get("CPU", 1)) for node in nodes)
    cores = settings.cores_per_replica or smallest
    if cores > smallest:
        raise ValueError(
            f"--cores-per-replica {cores} is more than the smallest node has ({smallest})"
        )
    replicas = settings.replicas or sum(int(node.get("CPU", 1)) // cores for node in nodes)
    return max(1, replicas), {"num_cpus": cores}


def replica_cpu_env(slot: int, cores: int) -> dict[str, str]:
    """vLLM's CPU binding for the replica holding core slot ``slot`` of its
    node: its own ``cores`` cores, all computing, none kept back for a front
    end (which halved throughput here)."""
    return {
        "VLLM_CPU_OMP_THREADS_BIND": f"{slot * cores}-{(slot + 1) * cores - 1}",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "OMP_NUM_THREADS": str(cores),
    }


def _claim_core_slot(
    cores: int, name: str = "bge-m3-sparse-cores"
) -> tuple[int, socket.socket | None]:
    """The first core range no other replica on this node holds.

    A replica holds its range with an abstract Unix socket (Linux): the kernel
    releases it when the process ends, and nothing is left on disk.
    """
    total = os.cpu_count() or cores
    for slot in range(max(1, total // cores)):
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            holder.bind(f"\0{name}-{slot}")
        except OSError:
            holder.close()
            continue
        return slot, holder
    return 0, None


class Replica:
    """One ``vllm.LLM`` with the plugin, in a Ray actor; called on batches of rows."""

    def __init__(
        self, model: str, options: EncodeOptions, settings: EngineSettings, cores: int | None
    ) -> None:
        self._slot_holder = None
        if cores is not None and not on_gpu():
            slot, self._slot_holder = _claim_core_slot(cores)
            # Before vLLM starts: its engine process inherits them.
            os.environ.update(replica_cpu_env(slot, cores))
        from .engine import Encoder
        from .job import encode_rows

        self._encode_rows = encode_rows
        self.encoder = Encoder(model, options, settings)
        self.ready_at = time.time()  # the driver counts the job's time from the first replica's

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        columns = batch.to_pydict()
        rows = [
            Row(id=i, text=t, file=f, row=r, problem=p)
            for i, t, f, r, p in zip(
                columns["id"], columns["text"], columns["file"], columns["row"], columns["problem"]
            )
        ]
        results = self._encode_rows(self.encoder, rows)
        vectors = [r if isinstance(r, Vector) else None for r in results]
        return pa.table(
            {
                "id": pa.array(columns["id"], pa.string()),
                "file": pa.array(columns["file"], pa.string()),
                "row": pa.array(columns["row"], pa.int64()),
                "shard": pa.array(columns["shard"], pa.int64()),
                "error": pa.array(
                    [r if isinstance(r, str) else None for r in results], pa.string()
                ),
                "num_tokens": pa.array([v.num_tokens if v else None for v in vectors], pa.int32()),
                "indices": pa.array(
                    [v.indices if v else None for v in vectors], pa.list_(pa.int32())
                ),
                "values": pa.array(
                    [v.values if v else None for v in vectors], pa.list_(pa.float32())
                ),
                "dense": pa.array(
                    [v.dense if v else None for v in vectors], pa.list_(pa.float32())
                ),
                "ready_at": pa.array([self.ready_at] * len(rows), pa.float64()),
            }
        )


def read_file(
    batch: Any,
    id_column: str,
    text_column: str,
    rows_per_shard: int,
    done: frozenset[int],
    batch_rows: int,
) -> Iterator[Any]:
    """Rows of the files in ``batch`` (one file, at ``offset`` rows into the
    input), with their shard number, minus the shards already done."""
    import pyarrow as pa

    def table(rows: list[Row], shards: list[int]) -> Any:
        return pa.table(
            {
                "id": pa.array([r.id for r in rows], pa.string()),
                # A text that is not a string travels as "", its problem named.
                "text": pa.array(
                    [r.text if isinstance(r.text, str) else "" for r in rows], pa.string()
                ),
                "file": pa.array([r.file for r in rows], pa.string()),
                "row": pa.array([r.row for r in rows], pa.int64()),
                "shard": pa.array(shards, pa.int64()),
                "problem": pa.array(
                    [
                        r.problem or (check_text(r.text) if not isinstance(r.text, str) else None)
                        for r in rows
                    ],
                    pa.string(),
                ),
            }
        )

    for path, offset in zip(batch["path"].to_pylist(), batch["offset"].to_pylist()):
        rows: list[Row] = []
        shards: list[int] = []
        for position, row in enumerate(
            read_rows([Path(path)], id_column, text_column), start=offset
        ):
            shard = position // rows_per_shard
            if shard in done:
                continue
            rows.append(row)
            shards.append(shard)
            if len(rows) == batch_rows:
                yield table(rows, shards)
                rows, shards = [], []
        if rows:
            yield table(rows, shards)


def _shards(batches: Iterator[Any]) -> Iterator[tuple[int, list[Row], list[Vector | str]]]:
    """Regroup the replicas' output rows, which come in input order, into shards."""
    current: int | None = None
    seen: set[int] = set()
    rows: list[Row] = []
    results: list[Vector | str] = []
    for batch in batches:
        for item in batch.to_pylist():
            if item["shard"] != current:
                if current is not None:
                    yield current, rows, results
                if item["shard"] in seen:  # would overwrite a written shard with part of it
                    raise RuntimeError(f"rows of shard {item['shard']} came out of order")
                current, rows, results = item["shard"], [], []
                seen.add(current)
            rows.append(Row(id=item["id"], text=None, file=item["file"], row=item["row"]))
            if item["error"] is not None:
                results.append(item["error"])
            else:
                results.append(
                    Vector(item["num_tokens"], item["indices"], item["values"], item["dense"])
                )
    if current is not None:
        yield current, rows, results


def _start_ray(settings: RaySettings) -> None:
    import ray

    if ray.is_initialized():
        return
    if settings.address is not None:
        ray.init(address=settings.address, log_to_driver=settings.log_to_driver)
    else:
        ray.init(include_dashboard=False, log_to_driver=settings.log_to_driver)


def run_job_on_ray(
    job: Job,
    files: list[Path],
    counts: list[int],
    output: Path,
    settings: EngineSettings,
    ray_settings: RaySettings,
    batch_size: int,
    open_sink: Callable[[int | None], SinkLike] | None = None,
    dense_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> Summary:
    """:func:`~.job.run_job` on Ray Data, ``counts`` being each file's rows
    (:func:`~.reader.count_rows`). Ray Data shows its bars (rows per
    stage); ``progress(rows, tokens)`` is called for each shard skipped, then
    ``on_start()`` when the first rows come back, then ``progress`` for each
    shard written."""

    manifest = open_output(output, job)
    summary = Summary()
    started, started_at = time.perf_counter(), time.time()
    total = sum(counts)
    n_shards = -(-total // job.rows_per_shard)
    done = frozenset(i for i in range(n_shards) if shard_name(i) in manifest.shards)
    summary.shards_skipped = len(done)
    if progress:
        for name in sorted(manifest.shards):
            progress(manifest.shards[name].get("rows", 0), 0)
    writer = ShardWriter(output, manifest, summary, dense_size, progress)
    if len(done) < n_shards:
        _start_ray(ray_settings)
        dataset = _dataset(job, files, counts, done, settings, ray_settings, batch_size)
        if open_sink is not None:
            writer.sink = open_sink(dense_size)
        ready: list[float] = []

        def batches() -> Iterator[Any]:
            for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                if len(batch):
                    if not ready and on_start:
                        on_start()  # the first rows are in: an engine is ready
                    table: Any = batch  # a pyarrow.Table (batch_format)
                    ready.append(min(table.column("ready_at").to_pylist()))
                yield batch

        for index, rows, results in _shards(batches()):
            name = shard_name(index)
            shard, errors = collect(rows, results, name, job.options.dense)
            writer.write(name, len(rows), shard, errors)
        if ready:
            # As on one machine: the job's time from the first engine ready;
            # Ray's and the engines' start apart.
            summary.engine_seconds = max(0.0, min(ready) - started_at)
    writer.finish()
    summary.seconds = time.perf_counter() - started - summary.engine_seconds
    return summary


def _dataset(
    job: Job,
    files: list[Path],
    counts: list[int],
    done: frozenset[int],
    settings: EngineSettings,
    ray_settings: RaySettings,
    batch_size: int,
) -> Any:
    """The job's rows, read on the command's node, then encoded by the
    replicas: a Ray Dataset of result batches, in input order."""
    import ray
    import ray.data

    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    replicas, resources = replica_plan(nodes, ray_settings)
    cores = int(resources["num_cpus"]) if "num_gpus" not in resources else None
    offsets = [sum(counts[:i]) for i in range(len(files))]
    items = [{"path": str(p), "offset": o} for p, o, n in zip(files, offsets, counts) if n]
    dataset = (
        ray.data.from_items(items, override_num_blocks=max(1, len(items)))
        .map_batches(
            # Read where the command runs, which sees the input paths;
            # the rows then travel to the replicas, wherever they are.
            # (Ray's own local:// reads pin themselves so, by this label.)
            cast(Any, read_file),  # a function of one batch, given fn_kwargs
            batch_size=1,
            batch_format="pyarrow",
            num_cpus=0,
            label_selector={"ray.io/node-id": ray.get_runtime_context().get_node_id()},
            fn_kwargs={
                "id_column": job.id_column,
                "text_column": job.text_column,
                "rows_per_shard": job.rows_per_shard,
                "done": done,
                "batch_rows": batch_size,
            },
        )
        .map_batches(
            Replica,
            batch_size=batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=replicas),
            fn_constructor_args=(job.model, job.options, settings, cores),
            **cast(dict[str, Any], resources),  # num_gpus or num_cpus
        )
    )
    # Rows back in input order, for this dataset only: its context is its
    # own copy, and the caller's other datasets keep Ray's process-wide one.
    dataset.context.execution_options.preserve_order = True
    return dataset
