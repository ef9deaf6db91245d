"""The index job on Ray Data: the same shards, manifest and resume as on one machine.

The pipeline is ``from_items(files) → map_batches(read) →
map_batches(Replica, concurrency=N) → the driver writes``:

- each input file is read by one task, on the node that runs the command
  (which sees the input paths), with this package's own reader, so
  that ids, bad rows and shard numbers are those of the single-machine path
  (a row's shard is its position in the whole input, over ``rows_per_shard``);
  rows of shards already done are dropped there;
- each :class:`Replica` holds one ``vllm.LLM`` with the plugin, and runs
  :func:`~._job.encode_rows`, the single-machine code, on its batches;
- the driver receives the rows in input order (``preserve_order``) and
  :class:`RayBackend` regroups them into shards for :func:`~._job.run_job`,
  the writer loop of both backends.

``ray.data.llm`` is not used: its tasks are generate, embed, classify and
score, it sends prompts straight to the engine, and vLLM runs IO-processor
plugins only in ``LLM.encode`` and ``/pooling``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .._config import cpu_binding
from ._engine import EncodeOptions, EngineSettings, on_gpu
from ._job import Job, ShardResults, Vector
from ._output import vector_columns
from ._reader import Row, check_text, read_rows

__all__ = ["RayBackend", "RaySettings", "claim_core_slot", "replica_plan"]

logger = logging.getLogger(__name__)


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


def claim_core_slot(
    cores: int, name: str = "bge-m3-sparse-cores"
) -> tuple[int, socket.socket | None]:
    """The first range of ``cores`` cores that no other replica on this node
    holds, and what holds it (keep it while the replica lives).

    A replica holds its range with an abstract Unix socket (Linux): the kernel
    releases it when the process ends, and nothing is left on disk. When every
    range is held (a node that tells Ray it has more CPUs than it has), the
    replica shares the first range, and says so in its log.
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
    logger.warning(
        "bge-m3-sparse index: every range of %d cores on this node is held by another "
        "replica; this one shares cores 0-%d (give --cores-per-replica or --replicas so "
        "that they fit the node's cores)",
        cores,
        cores - 1,
    )
    return 0, None


class Replica:
    """One ``vllm.LLM`` with the plugin, in a Ray actor; called on batches of rows."""

    def __init__(
        self, model: str, options: EncodeOptions, settings: EngineSettings, cores: int | None
    ) -> None:
        self._slot_holder = None
        if cores is not None and not on_gpu():
            slot, self._slot_holder = claim_core_slot(cores)
            # Before vLLM starts: its engine process inherits them.
            os.environ.update(cpu_binding(cores, first=slot * cores))
        from ._engine import Encoder
        from ._job import encode_rows

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
        vector = vector_columns(
            [v.num_tokens if v else None for v in vectors],
            [v.indices if v else None for v in vectors],
            [v.values if v else None for v in vectors],
            [v.dense if v else None for v in vectors],
        )
        return pa.table(
            {
                "id": pa.array(columns["id"], pa.string()),
                "file": pa.array(columns["file"], pa.string()),
                "row": pa.array(columns["row"], pa.int64()),
                "shard": pa.array(columns["shard"], pa.int64()),
                "error": pa.array(
                    [r if isinstance(r, str) else None for r in results], pa.string()
                ),
                **vector,
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


class RayBackend:
    """Reads the input on this node and encodes it on Ray Data's replicas;
    ``counts`` are each file's rows (:func:`~._reader.count_rows`)."""

    def __init__(
        self,
        job: Job,
        files: list[Path],
        counts: list[int],
        settings: EngineSettings,
        ray_settings: RaySettings,
        batch_size: int,
    ) -> None:
        self.job, self.files, self.counts = job, files, counts
        self.settings, self.ray_settings, self.batch_size = settings, ray_settings, batch_size

    def shards(
        self, done: frozenset[int], ready: Callable[[float], None]
    ) -> Generator[ShardResults, None, None]:
        _start_ray(self.ray_settings)
        dataset = dataset_for(
            self.job,
            self.files,
            self.counts,
            done,
            self.settings,
            self.ray_settings,
            self.batch_size,
        )

        def batches() -> Iterator[Any]:
            for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
                if len(batch):
                    table: Any = batch  # a pyarrow.Table (batch_format)
                    ready(min(table.column("ready_at").to_pylist()))
                yield batch

        yield from _shards(batches())


def file_items(files: list[Path], counts: list[int]) -> list[dict[str, Any]]:
    """One item per file with rows: its path, and its first row's position in the input."""
    offsets = [sum(counts[:i]) for i in range(len(files))]
    # Absolute: the read tasks run in Ray workers, whose working folder is not the command's.
    return [{"path": str(p.resolve()), "offset": o} for p, o, n in zip(files, offsets, counts) if n]


def dataset_for(
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
    items = file_items(files, counts)
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
