"""``bge-m3-sparse index INPUT... OUTPUT --model MODEL``: the command line of the index job."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import (
    CPU_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_INPUTS,
    GPU_MEMORY_UTILIZATION,
    INDEX_VLLM_LOGGING_LEVEL,
    MAX_INPUTS_ENV,
    QUIET_WARNINGS,
    install_hint,
    max_inputs,
)

if TYPE_CHECKING:  # imported where used: the command starts before vLLM is imported
    from ._job import Job, Summary
    from ._sinks import SinkSpec
    from ._types import EngineSettings

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
    _corpus_arguments(parser)
    _engine_arguments(parser)
    _sink_and_ray_arguments(parser)


def _corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """What is read, what each row keeps, and where it goes."""
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="JSONL, Parquet or CSV files, folders of them, or globs",
    )
    parser.add_argument(
        "output",
        metavar="OUTPUT",
        help="the output folder: Parquet shards, _manifest.json, _errors.jsonl",
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
        help="texts per engine call, the command's own count (default: 512; at most "
        f"{MAX_INPUTS_ENV}, {DEFAULT_MAX_INPUTS} by default)",
    )


def _engine_arguments(parser: argparse.ArgumentParser) -> None:
    """vLLM's settings for the engine."""
    parser.add_argument(
        "--dtype",
        default="auto",
        help="vLLM's --dtype (default: auto, this machine's choice: vLLM's own on a GPU "
        "(float16), bfloat16 on a CPU with bfloat16 instructions, float32 on other CPUs; "
        "the command says which, and why)",
    )
    parser.add_argument("--max-model-len", type=int, help="vLLM's --max-model-len")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help=f"the share of the device's memory vLLM takes (default: {GPU_MEMORY_UTILIZATION} "
        f"on a GPU, {CPU_GPU_MEMORY_UTILIZATION} on a CPU, where it is RAM; vLLM's own "
        "default is 0.92)",
    )
    parser.add_argument("--max-num-batched-tokens", type=int, help="vLLM's setting")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM's setting")


def _sink_and_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the vectors are loaded too, and how the job is spread."""
    parser.add_argument(
        "--sink",
        metavar="KIND:TARGET",
        help="also load the vectors into milvus-lite:PATH, qdrant:PATH (both "
        "in-process), milvus:URI, qdrant:URL or postgresql://USER@HOST:PORT/DB (servers; or "
        "a libpq keyword/value string)",
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


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
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
    cap = max_inputs()
    if args.batch_size > cap:
        parser.error(
            f"--batch-size must be <= {cap} (the plugin's inputs per request, "
            f"{MAX_INPUTS_ENV}), got {args.batch_size}"
        )
    if (args.replicas or args.cores_per_replica) and not (args.ray or args.ray_address):
        parser.error("--replicas and --cores-per-replica go with --ray or --ray-address")
    _check_request_options(args, parser)


# The options that are fields of the plugin's request, checked by its schema:
# one definition of their valid values (nan and inf included) for both.
REQUEST_OPTIONS = {"top_k": "--top-k", "min_weight": "--min-weight"}


def _check_request_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    from pydantic import ValidationError

    from ..schemas import SparseEmbeddingRequest

    given = {f: getattr(args, f) for f in REQUEST_OPTIONS if getattr(args, f) is not None}
    try:
        SparseEmbeddingRequest.model_validate({"input": "a", **given})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = str(err["loc"][0])
        parser.error(f"{REQUEST_OPTIONS[field]} {given[field]!r}: {err['msg'].lower()}")


def _arguments(
    args: argparse.Namespace, parser: argparse.ArgumentParser, output: Path
) -> tuple[list[Path], SinkSpec | None]:
    """The input files and the sink, or a one-line refusal (exit 2) that
    names the argument, before any engine or sink starts."""
    from ._output import check_output_path
    from ._reader import resolve_inputs
    from ._sinks import parse_sink

    try:
        check_output_path(output)
        files = resolve_inputs(args.inputs, output)
        return files, parse_sink(args.sink, args.collection) if args.sink is not None else None
    except ValueError as exc:
        parser.error(str(exc))


class ProgressBar:
    """tqdm's bar from the moment the engine is ready: rows, documents/s and
    tokens/s counted as the summary counts them, from the same numbers."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.skipped = 0
        self.bar: Any = None

    def skip(self, rows: int) -> None:
        self.skipped += rows

    def start(self) -> None:
        if self.enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=self.skipped,
                unit="row",
                desc="indexing",
                dynamic_ncols=True,
                # tqdm's own rate counts the skipped rows and smooths; the
                # postfix gives the summary's.
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rows "
                "[{elapsed}<{remaining}{postfix}]",
            )

    def advance(self, rows: int, summary: Summary) -> None:
        if self.bar is not None:
            elapsed = self.bar.format_dict["elapsed"]
            self.bar.set_postfix_str(rates(summary.documents, summary.tokens, elapsed), False)
            self.bar.update(rows)

    def close(self, summary: Summary | None) -> None:
        if self.bar is not None:
            if summary is not None:  # the last frame: the summary's own figures
                figures = rates(summary.documents, summary.tokens, summary.seconds)
                self.bar.bar_format = (
                    "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rows "
                    f"[{summary.seconds:.1f} s, {figures}]"
                )
                self.bar.refresh()
            self.bar.close()


def rates(documents: int, tokens: int, seconds: float) -> str:
    """The job's speed, as the progress bar and the summary both print it."""
    if seconds <= 0:
        return "0.0 documents/s, 0 tokens/s"
    return f"{documents / seconds:,.1f} documents/s, {tokens / seconds:,.0f} tokens/s"


def _ray_backend(args: argparse.Namespace, job: Job, files: list[Path], settings: Any) -> Any:
    from .._missing import is_missing

    try:
        import ray.data  # noqa: F401
    except ImportError as exc:
        if is_missing(exc, "ray.data", "pyarrow"):  # what the [ray] extra brings
            says = f"--ray needs Ray Data ({exc}): {install_hint('ray')}"
        else:
            says = f"--ray: Ray Data is installed but fails to import: {type(exc).__name__}: {exc}"
        print(f"bge-m3-sparse index: {says}", file=sys.stderr)
        raise SystemExit(2) from None
    from ._ray import RayBackend, RaySettings
    from ._reader import count_rows

    ray_settings = RaySettings(
        address=args.ray_address,
        replicas=args.replicas,
        cores_per_replica=args.cores_per_replica,
        log_to_driver=args.verbose,
    )
    # Counted once per file: the shard of each row comes from its file's offset.
    counts = [count_rows([path]) for path in files]
    return RayBackend(job, files, counts, settings, ray_settings, args.batch_size), sum(counts)


def _backend(args: argparse.Namespace, job: Job, files: list[Path], settings: Any) -> Any:
    """The backend the arguments ask for, and the number of input rows."""
    if args.ray or args.ray_address:
        return _ray_backend(args, job, files, settings)
    from ._engine import Encoder
    from ._local import LocalBackend
    from ._reader import count_rows

    def make_encoder() -> Encoder:
        # The one silent stretch of a run: vLLM loads the model and warms up.
        print(
            f"bge-m3-sparse index: starting vLLM's engine on {args.model} (30 s to a few "
            "minutes; --verbose shows vLLM's log)",
            file=sys.stderr,
            flush=True,
        )
        return Encoder.start(job.model, job.options, settings)

    return LocalBackend(job, files, make_encoder, args.batch_size), count_rows(files)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_arguments(args, parser)
    if not args.verbose:
        # vLLM logs its start-up (and CPU-build warnings) to stdout, around the
        # summary; --verbose shows them.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", INDEX_VLLM_LOGGING_LEVEL)
        # vLLM's CPU build uses a deprecated torch name as it imports, in this
        # process and in its engine's (which inherits the variable).
        os.environ.setdefault("PYTHONWARNINGS", QUIET_WARNINGS)
    from .._exceptions import OutputMismatch, SinkError
    from .._model_location import locate_model
    from ._job import run_job
    from ._model_info import hidden_size, vocab_size
    from ._sinks import notes as sink_notes
    from ._sinks import open_reporting_sink

    output = Path(args.output)
    files, sink = _arguments(args, parser, output)
    # Before any engine starts or OUTPUT is made: a mistyped folder would
    # otherwise become a hub id that vLLM retries for a minute.
    where = locate_model(args.model)
    if where.problem is not None:
        print(f"bge-m3-sparse index: --model {where.problem}", file=sys.stderr)
        return 2
    job, settings = _job(args, files, sink.describe() if sink else None)
    for note in sink_notes(sink, args.top_k) if sink else []:
        print(f"bge-m3-sparse index: {note}", file=sys.stderr)
    backend, total = _backend(args, job, files, settings)
    dense_size = hidden_size(job.model) if args.dense else None
    progress = ProgressBar(total=total, enabled=not args.no_progress)
    summary: Summary | None = None
    try:
        summary = run_job(
            job,
            output,
            backend,
            total,
            dense_size,
            (lambda: open_reporting_sink(sink, dense_size, vocab_size(job.model), args.top_k))
            if sink
            else None,
            progress,
        )
    except OutputMismatch as exc:
        print(f"bge-m3-sparse index: refused: {exc}", file=sys.stderr)
        return 2
    except SinkError as exc:
        print(f"bge-m3-sparse index: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.close(summary)
    assert summary is not None  # run_job returned
    _report(summary, output, backend.describe(), sink)
    return 1 if summary.totals["errors"] and not args.allow_errors else 0


def _report(summary: Summary, output: Path, backend: list[str], sink: SinkSpec | None) -> None:
    """The summary, the backend's lines and the sink's, on stdout."""
    print_summary(summary, output)
    for line in backend:
        print(line)
    if sink is not None:
        # Every shard was loaded by an earlier run, which stopped before its sink finished.
        finished_here = summary.sink_finished and summary.shards_skipped and not summary.shards_done
        print(
            f"loaded into {sink.describe()}"
            + ("; finished here: an earlier run stopped before it was" if finished_here else "")
        )


def _job(
    args: argparse.Namespace, files: list[Path], sink: str | None
) -> tuple[Job, EngineSettings]:
    """The job the arguments describe (what the manifest records), and the engine's settings."""
    from .. import __version__, installed_vllm_version
    from .._precision import choose_precision, cpu_flags
    from ._job import Job
    from ._model_info import on_gpu
    from ._types import EncodeOptions, EngineSettings

    # Chosen here, once, on the machine that runs the command (with --ray,
    # for every replica: its process imports no torch to look for a GPU),
    # and recorded: a resumed run at another precision is another job.
    ray = bool(args.ray or args.ray_address)
    precision = choose_precision(args.dtype, not ray and on_gpu(), cpu_flags())
    print(f"bge-m3-sparse index: {precision.line()}", file=sys.stderr)
    options = EncodeOptions(
        top_k=args.top_k, min_weight=args.min_weight, truncate=args.truncate, dense=args.dense
    )
    settings = EngineSettings(
        dtype=precision.dtype,
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
        input_mtimes=[f.stat().st_mtime_ns for f in files],
        id_column=args.id_column,
        text_column=args.text_column,
        rows_per_shard=args.rows_per_shard,
        options=options,
        dtype=precision.dtype,
        max_model_len=args.max_model_len,
        plugin_version=__version__,
        vllm_version=installed_vllm_version(),
        sink=sink,
    )
    return job, settings


def print_summary(summary: Summary, output: Path) -> None:
    from ._output import ERRORS

    totals = summary.totals
    engine = f" (engine start {summary.engine_seconds:.1f} s)" if summary.engine_seconds else ""
    print(
        f"indexed {summary.documents:,} documents ({summary.tokens:,} tokens) in {summary.seconds:.1f} s"
        f"{engine}: {rates(summary.documents, summary.tokens, summary.seconds)}; "
        f"{summary.errors:,} bad rows; "
        f"{summary.shards_done} shards written, {summary.shards_skipped} already done"
    )
    print(
        f"output: {output}/ holds {totals['documents']:,} documents in {len(list(output.glob('part-*.parquet')))} "
        f"shards; {totals['errors']:,} bad rows"
        + (f", listed in {output / ERRORS}" if totals["errors"] else "")
    )
