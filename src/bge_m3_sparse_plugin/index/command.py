"""``bge-m3-sparse index INPUT... OUTPUT --model MODEL``: the command line of the index job."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the command starts before vLLM is imported
    from .engine import EngineSettings
    from .job import Job, Summary

__all__ = ["add_arguments", "run"]

EPILOG = """\
example (one machine, the small test model):
  python -m bge_m3_sparse_plugin.tiny_model models/bge-m3-tiny
  bge-m3-sparse index corpus.jsonl vectors/ --model models/bge-m3-tiny --dtype float32

Re-running the same command resumes: shards already in OUTPUT/_manifest.json are kept.
Exit status: 0 done; 1 done, but some rows were bad (see OUTPUT/_errors.jsonl; --allow-errors
makes this 0); 2 refused (bad arguments, or OUTPUT holds another job).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="JSONL, Parquet or CSV files, folders of them, or globs; then the output folder",
    )
    parser.add_argument("--model", required=True, help="model folder or name (BAAI/bge-m3)")
    parser.add_argument("--id-column", default="id", help="column holding the row id (default: id)")
    parser.add_argument(
        "--text-column", default="text", help="column holding the text (default: text)"
    )
    parser.add_argument("--dense", action="store_true", help="also store the dense vector")
    parser.add_argument("--top-k", type=int, help="keep each row's k heaviest tokens")
    parser.add_argument("--min-weight", type=float, help="drop tokens lighter than this")
    parser.add_argument(
        "--truncate",
        type=int,
        metavar="N",
        help="cut texts to N tokens (as FlagEmbedding's max_length); without it an "
        "over-long text is an error row",
    )
    parser.add_argument("--rows-per-shard", type=int, default=10_000, help="default: 10000")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=512,
        help="texts per engine call (default: 512; at most 1024)",
    )
    parser.add_argument("--dtype", default="auto", help="vLLM's --dtype (default: auto)")
    parser.add_argument("--max-model-len", type=int, help="vLLM's --max-model-len")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="vLLM's setting (default: 0.9 on a GPU, 0.2 on a CPU, where it is RAM)",
    )
    parser.add_argument("--max-num-batched-tokens", type=int, help="vLLM's setting")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM's setting")
    parser.add_argument(
        "--sink",
        metavar="KIND:TARGET",
        help="also load the vectors into milvus-lite:PATH, qdrant:PATH (both "
        "in-process), milvus:URI or qdrant:URL (servers)",
    )
    parser.add_argument(
        "--collection",
        default="bge_m3_sparse",
        help="the --sink collection (default: bge_m3_sparse)",
    )
    parser.add_argument(
        "--allow-errors", action="store_true", help="exit 0 even when some rows were bad"
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="run on Ray Data: a local Ray on this machine, or the cluster of "
        "--ray-address (needs the [ray] extra, and the plugin on every node)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="an existing Ray cluster (ray://HOST:10001, HOST:6379 or auto); implies --ray",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        help="with Ray: engines (default: one per GPU; on CPUs, one per "
        "--cores-per-replica cores of each node)",
    )
    parser.add_argument(
        "--cores-per-replica",
        type=int,
        help="with Ray on CPUs: cores each engine binds (default: the smallest node's)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--verbose", action="store_true", help="show vLLM's own log (otherwise errors only)"
    )


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if len(args.paths) < 2:
        parser.error("give at least one INPUT and the OUTPUT folder")
    for name, value, low in (
        ("--rows-per-shard", args.rows_per_shard, 1),
        ("--batch-size", args.batch_size, 1),
        ("--top-k", args.top_k, 1),
        ("--truncate", args.truncate, 2),
        ("--replicas", args.replicas, 1),
        ("--cores-per-replica", args.cores_per_replica, 1),
    ):
        if value is not None and value < low:
            parser.error(f"{name} must be >= {low}, got {value}")
    if args.batch_size > 1024:
        parser.error(
            f"--batch-size must be <= 1024 (the plugin's inputs per request), got {args.batch_size}"
        )
    if (args.replicas or args.cores_per_replica) and not (args.ray or args.ray_address):
        parser.error("--replicas and --cores-per-replica go with --ray or --ray-address")
    if args.min_weight is not None and args.min_weight < 0:
        parser.error(f"--min-weight must be >= 0, got {args.min_weight}")


class _Progress:
    """tqdm's bar from the moment the engine is ready (documents, tokens/s, ETA)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.skipped = 0
        self.tokens = 0
        self.bar: Any = None

    def start(self) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=self.skipped,
                unit="doc",
                desc="indexing",
                dynamic_ncols=True,
                smoothing=0.1,
            )

    def advance(self, rows: int, tokens: int) -> None:
        if self.bar is None:
            self.skipped += rows  # shards already done, before the engine starts
            return
        self.tokens += tokens
        self.bar.update(rows)
        elapsed = self.bar.format_dict["elapsed"]
        self.bar.set_postfix_str(f"{self.tokens / max(elapsed, 1e-9):,.0f} tokens/s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_on_ray(
    args: argparse.Namespace,
    job: Any,
    files: list[Path],
    output: Path,
    settings: Any,
    open_the_sink: Any,
) -> Any:
    from .._missing import is_missing

    try:
        import ray.data  # noqa: F401
    except ImportError as exc:
        if is_missing(exc, "ray.data", "pyarrow"):  # what the [ray] extra brings
            says = f"--ray needs Ray Data ({exc}): pip install 'bge-m3-sparse-plugin[ray]'"
        else:
            says = f"--ray: Ray Data is installed but fails to import: {type(exc).__name__}: {exc}"
        print(f"bge-m3-sparse index: {says}", file=sys.stderr)
        raise SystemExit(2) from None
    from .cluster import RaySettings, run_job_on_ray
    from .reader import count_rows

    dense_size = None
    if job.options.dense:
        from transformers import AutoConfig

        dense_size = int(AutoConfig.from_pretrained(job.model).hidden_size)
    ray_settings = RaySettings(
        address=args.ray_address,
        replicas=args.replicas,
        cores_per_replica=args.cores_per_replica,
        log_to_driver=args.verbose,
    )
    # Counted once: the shard of each row comes from its file's offset, the
    # bar's total from their sum.
    counts = [count_rows([path]) for path in files]
    progress = _Progress(total=sum(counts), enabled=not args.no_progress)
    try:
        return run_job_on_ray(
            job,
            files,
            counts,
            output,
            settings,
            ray_settings,
            args.batch_size,
            open_the_sink,
            dense_size,
            progress.advance,
            progress.start,
        )
    finally:
        progress.close()


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check(args, parser)
    if not args.verbose:
        # vLLM logs its start-up (and CPU-build warnings) to stdout, around the
        # summary; --verbose shows them.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from .engine import Encoder
    from .job import run_job
    from .output import OutputMismatch
    from .reader import count_rows, resolve_inputs
    from .sinks import open_sink, parse_sink

    *inputs, out = args.paths
    output = Path(out)
    try:
        files = resolve_inputs(inputs)
    except ValueError as exc:
        parser.error(str(exc))
    sink = None
    if args.sink is not None:
        try:
            sink = parse_sink(args.sink, args.collection)
        except ValueError as exc:
            parser.error(str(exc))
    job, settings = _job(args, files, sink.describe() if sink else None)
    model, options = job.model, job.options
    open_the_sink = (lambda dense_size: open_sink(sink, dense_size)) if sink else None
    try:
        if args.ray or args.ray_address:
            summary = _run_on_ray(args, job, files, output, settings, open_the_sink)
        else:
            progress = _Progress(total=count_rows(files), enabled=not args.no_progress)
            try:
                summary = run_job(
                    job,
                    files,
                    output,
                    lambda: Encoder(model, options, settings),
                    args.batch_size,
                    progress.advance,
                    progress.start,
                    open_the_sink,
                )
            finally:
                progress.close()
    except OutputMismatch as exc:
        print(f"bge-m3-sparse index: refused: {exc}", file=sys.stderr)
        return 2
    _print_summary(summary, output)
    if sink is not None:
        print(f"loaded into {sink.describe()}")
    if summary.totals["errors"] and not args.allow_errors:
        return 1
    return 0


def _job(
    args: argparse.Namespace, files: list[Path], sink: str | None
) -> tuple[Job, EngineSettings]:
    """The job the arguments describe (what the manifest records), and the engine's settings."""
    from .. import __version__, installed_vllm_version
    from .engine import EncodeOptions, EngineSettings
    from .job import Job

    options = EncodeOptions(
        top_k=args.top_k, min_weight=args.min_weight, truncate=args.truncate, dense=args.dense
    )
    settings = EngineSettings(
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_batched_tokens=args.max_num_batched_tokens,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    model = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    job = Job(
        model=model,
        inputs=[str(f.resolve()) for f in files],
        input_sizes=[f.stat().st_size for f in files],
        id_column=args.id_column,
        text_column=args.text_column,
        rows_per_shard=args.rows_per_shard,
        options=options,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        plugin_version=__version__,
        vllm_version=installed_vllm_version(),
        sink=sink,
    )
    return job, settings


def _print_summary(summary: Summary, output: Path) -> None:
    from .output import ERRORS

    rate = summary.documents / summary.seconds if summary.seconds else 0.0
    totals = summary.totals
    engine = f" (engine start {summary.engine_seconds:.1f} s)" if summary.engine_seconds else ""
    print(
        f"indexed {summary.documents:,} documents ({summary.tokens:,} tokens) in {summary.seconds:.1f} s"
        f"{engine}: {rate:,.1f} documents/s, "
        f"{summary.tokens / summary.seconds if summary.seconds else 0:,.0f} tokens/s; "
        f"{summary.errors:,} bad rows; "
        f"{summary.shards_done} shards written, {summary.shards_skipped} already done"
    )
    print(
        f"output: {output}/ holds {totals['documents']:,} documents in {len(list(output.glob('part-*.parquet')))} "
        f"shards; {totals['errors']:,} bad rows"
        + (f", listed in {output / ERRORS}" if totals["errors"] else "")
    )
