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

import os
import socket
import sys
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .._config import CORE_SLOTS_ENV, DEFAULT_CORE_SLOTS, cpu_binding
from ._job import Job, ShardResults, Vector
from ._model_info import on_gpu
from ._output import vector_columns
from ._reader import Row, check_text, id_base, read_rows
from ._types import EncodeOptions, EngineSettings

__all__ = [
    "Placement",
    "RayBackend",
    "RaySettings",
    "block_bytes",
    "claim_core_slot",
    "replica_plan",
    "start_ray",
]


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


def claim_core_slot(cores: int, name: str | None = None) -> tuple[int, socket.socket | None]:
    """The first range of ``cores`` cores that no other replica on this node
    holds, and what holds it (keep it while the replica lives).

    A replica holds its range with an abstract Unix socket (Linux): the kernel
    releases it when the process ends, and nothing is left on disk. Abstract
    sockets are per network namespace, so two Ray nodes started on one machine
    see each other's ranges. When every range is held (nodes that tell Ray
    they have more CPUs than the machine has), the replica shares the first
    range and gets no holder: its :class:`Placement` says ``shared``, and the
    command warns. ``name`` (``BGE_M3_SPARSE_CORE_SLOTS`` by default) is the
    namespace of the ranges: replicas of another name do not see these.
    """
    name = name or os.environ.get(CORE_SLOTS_ENV) or DEFAULT_CORE_SLOTS
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


@dataclass(frozen=True)
class Placement:
    """Where one replica ran: its Ray node, its process, and the cores it bound."""

    node: str  # the Ray node id (hex)
    pid: int
    cores: str  # "2-3" on CPUs; "gpu" on a GPU
    shared: bool = False  # every core range of its machine was held: it shares the first

    def describe(self) -> str:
        cores = "a GPU" if self.cores == "gpu" else f"cores {self.cores}"
        shared = " (SHARED with another replica)" if self.shared else ""
        return f"node {self.node[:12]} pid {self.pid} {cores}{shared}"


class Replica:
    """One ``vllm.LLM`` with the plugin, in a Ray actor; called on batches of rows."""

    def __init__(
        self, model: str, options: EncodeOptions, settings: EngineSettings, cores: int | None
    ) -> None:
        import ray

        self._slot_holder = None
        where = "gpu"
        shared = False
        if cores is not None and not on_gpu():
            slot, self._slot_holder = claim_core_slot(cores)
            shared = self._slot_holder is None
            binding = cpu_binding(cores, first=slot * cores)
            where = binding["VLLM_CPU_OMP_THREADS_BIND"]
            # Before vLLM starts: its engine process inherits them.
            os.environ.update(binding)
        self.placement = Placement(
            ray.get_runtime_context().get_node_id(), os.getpid(), where, shared
        )
        from ._engine import Encoder
        from ._job import encode_rows

        self._encode_rows = encode_rows
        self.encoder = Encoder.start(model, options, settings)
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
                # Which replica did the batch: the summary names the nodes.
                "node": pa.array([self.placement.node] * len(rows), pa.string()),
                "pid": pa.array([self.placement.pid] * len(rows), pa.int64()),
                "cores": pa.array([self.placement.cores] * len(rows), pa.string()),
                "shared": pa.array([self.placement.shared] * len(rows), pa.bool_()),
            }
        )


def read_file(
    batch: Any,
    id_column: str,
    text_column: str,
    rows_per_shard: int,
    done: frozenset[int],
    batch_rows: int,
    base: str,
) -> Iterator[Any]:
    """Rows of the files in ``batch`` (one file, at ``offset`` rows into the
    input), with their shard number, minus the shards already done."""
    import pyarrow as pa

    def table(rows: list[Row], shards: list[int]) -> Any:
        # A text that is not a string travels as "", its problem named (one
        # that is not Unicode, which Arrow cannot hold either, the reader has
        # made a problem already). A string is checked once, by the replica.
        problems = [
            r.problem or (check_text(r.text) if not isinstance(r.text, str) else None) for r in rows
        ]
        return pa.table(
            {
                "id": pa.array([r.id for r in rows], pa.string()),
                "text": pa.array(
                    [r.text if p is None else "" for r, p in zip(rows, problems)], pa.string()
                ),
                "file": pa.array([r.file for r in rows], pa.string()),
                "row": pa.array([r.row for r in rows], pa.int64()),
                "shard": pa.array(shards, pa.int64()),
                "problem": pa.array(problems, pa.string()),
            }
        )

    for path, offset in zip(batch["path"].to_pylist(), batch["offset"].to_pylist()):
        rows: list[Row] = []
        shards: list[int] = []
        for position, row in enumerate(
            read_rows([Path(path)], id_column, text_column, Path(base)), start=offset
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


def start_ray(settings: RaySettings, say: Callable[[str], None]) -> None:
    """Connect to the cluster the settings name, or start a local Ray; a
    connection the caller already has (``ray.init`` before) is used as it is."""
    import ray

    if ray.is_initialized():
        say("using this process's Ray connection (ray.init was called before)")
        return
    # ray.init() without an address follows RAY_ADDRESS, as Ray's own tools do.
    address = settings.address or os.environ.get("RAY_ADDRESS")
    if address:
        say(f"connecting to the Ray cluster at {address}")
        ray.init(address=address, log_to_driver=settings.log_to_driver)
    else:
        say(
            "starting a local Ray on this machine; it stops when the command ends "
            "(--ray-address uses a running cluster)"
        )
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
        self.placements: dict[tuple[str, int], Placement] = {}  # the replicas that did work

    def say(self, message: str) -> None:
        print(f"bge-m3-sparse index: {message}", file=sys.stderr, flush=True)

    def shards(
        self, done: frozenset[int], ready: Callable[[float], None]
    ) -> Generator[ShardResults, None, None]:
        start_ray(self.ray_settings, self.say)
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
                    self._note_placements(table)
                yield batch

        yield from _shards(batches())

    def _note_placements(self, table: Any) -> None:
        for node, pid, cores, shared in set(
            zip(*(table.column(c).to_pylist() for c in ("node", "pid", "cores", "shared")))
        ):
            if (node, pid) not in self.placements:
                placement = Placement(node, pid, cores, shared)
                self.placements[node, pid] = placement
                if shared:
                    self.say(
                        f"warning: the replica on {placement.describe()}: every range of "
                        "its machine's cores was held by another replica, so it binds the "
                        "first range beside one (give --replicas or --cores-per-replica so "
                        "that the replicas fit the machine's cores)"
                    )

    def describe(self) -> list[str]:
        """The summary's lines on where the replicas ran."""
        placements = sorted(self.placements.values(), key=lambda p: (p.node, p.pid))
        if not placements:
            return []
        nodes = len({p.node for p in placements})
        return [
            f"replicas: {len(placements)} on {nodes} Ray node{'s' if nodes != 1 else ''}: "
            + "; ".join(p.describe() for p in placements)
        ]


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
            # Pinned by Ray's node-id label, as Ray's own local:// reads are:
            # the one way that every Ray the [ray] extra allows takes
            # (docs/ray.md, "Ray versions").
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
                "base": str(id_base(files)),
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
    # For this dataset only (its context is its own copy; the caller's other
    # datasets keep Ray's process-wide one): rows back in input order, and
    # blocks of about one batch, so that each replica takes batches as it is
    # free (Ray's default, 128 MiB, put a whole file in one replica's task).
    dataset.context.execution_options.preserve_order = True
    dataset.context.target_max_block_size = block_bytes(files, counts, batch_size)
    return dataset


def block_bytes(files: list[Path], counts: list[int], batch_size: int) -> int:
    """About the bytes of ``batch_size`` rows as the read tasks yield them:
    the input's mean row, its file path (a column), and the other columns."""
    rows = max(1, sum(counts))
    text = sum(p.stat().st_size for p in files) / rows
    path = max((len(str(p.resolve())) for p in files), default=0)
    return max(1024, int(batch_size * (text + path + 64)))
