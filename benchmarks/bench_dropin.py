"""The drop-ins against what they replace, side by side in one run.

    python benchmarks/bench_dropin.py [--model small] [--docs 256] [--words 254] [--rounds 5]
    python benchmarks/bench_dropin.py --gpu --model realsize --only in-process   # benchmarks/gpu.sh

1. In this process: ``integrations.flagembedding.BGEM3FlagModel.encode``
   (vLLM with the plugin) against FlagEmbedding's own ``BGEM3FlagModel.encode``,
   the same documents, dense and sparse, float32 on both, on the same cores
   (FlagEmbedding: torch's threads, all cores; the drop-in's engine: the
   package's CPU binding, all cores computing; rounds alternate, so one runs
   while the other waits). The goal: at least FlagEmbedding's throughput.
   With ``--gpu``: both at use_fp16=True on the GPU (FlagEmbedding's
   model.half(); the drop-in's engine at vLLM's float16).
2. Against one server: the drop-in with ``base_url=`` against the typed
   client asking the same (dense and sparse, base64 vectors, batches of the
   drop-in's batch size). The goal: 0.95 or better.

Prints each contender's median and the ratios of throughput.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    SPECS,
    documents,
    interleaved,
    median,
    model_dir,
    print_settings,
    use_cpu_engine_env,
)
from _server import BenchServer

BATCH = 64


def report(label: str, times: dict[str, list[float]], n: int, base: str) -> None:
    medians = {name: median(t) for name, t in times.items()}
    for name, t in medians.items():
        runs = ", ".join(f"{x:.2f}" for x in times[name])
        print(f"[{label}] {name:28s} median {t:7.3f} s  {n / t:7.1f} docs/s  (all: {runs})")
    for name, t in medians.items():
        if name != base:
            print(f"[{label}] throughput {name} / {base}: {medians[base] / t:.2f}x")


def in_process(path: Path, docs: list[str], rounds: int, gpu: bool) -> None:
    import torch
    from FlagEmbedding import BGEM3FlagModel as FlagModel

    from bge_m3_sparse_plugin._precision import cpu_flags
    from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel, engine_dtype

    flag = FlagModel(str(path), use_fp16=gpu, devices="cuda:0" if gpu else "cpu")
    ours = BGEM3FlagModel(str(path), use_fp16=gpu)
    kwargs = {"return_dense": True, "return_sparse": True, "batch_size": 256, "max_length": 1024}
    runs = {
        "flagembedding": lambda: flag.encode(docs, **kwargs),
        "dropin (in-process)": lambda: ours.encode(docs, **kwargs),
    }
    if not gpu:  # what FlagEmbedding's default, use_fp16=True, gets here (_precision's rule)
        rule = engine_dtype(True, False, False, cpu_flags())
        default = BGEM3FlagModel(str(path))
        runs[f"dropin, use_fp16=True: {rule}"] = lambda: default.encode(docs, **kwargs)
    for run in runs.values():
        run()  # warm-up
    print(f"[in-process] torch threads for FlagEmbedding: {torch.get_num_threads()}")
    report("in-process", interleaved(runs, rounds), len(docs), "flagembedding")
    ours.close()
    if not gpu:
        default.close()


def remote(path: Path, docs: list[str], rounds: int) -> None:
    from bge_m3_sparse_plugin.client import SparseEmbeddingClient
    from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel

    with tempfile.TemporaryDirectory() as tmp:
        server = BenchServer(path, Path(tmp) / "server.log")
        try:
            client = SparseEmbeddingClient(server.url, timeout=600)
            ours = BGEM3FlagModel(str(path), base_url=server.url, batch_size=BATCH, timeout=600)

            def typed_client() -> None:
                for start in range(0, len(docs), BATCH):
                    client.embed(
                        docs[start : start + BATCH],
                        return_dense=True,
                        sparse_format="lexical_weights",
                        encoding_format="base64",
                    )

            runs = {
                "typed client": typed_client,
                "dropin (base_url=)": lambda: ours.encode(
                    docs, return_dense=True, return_sparse=True, max_length=1024
                ),
            }
            for run in runs.values():
                run()
            report("server", interleaved(runs, rounds), len(docs), "typed client")
            ours.close()
            client.close()
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", help="a size of _common.SPECS, or a folder")
    parser.add_argument("--gpu", action="store_true", help="on a GPU, float16 (use_fp16=True)")
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--words", type=int, default=254, help="words per doc; one token each")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=["in-process", "server"], default=None)
    args = parser.parse_args()
    if not args.gpu:
        use_cpu_engine_env()
    print_settings(
        model=args.model,
        docs=args.docs,
        tokens_per_doc=args.words + 2,
        rounds=args.rounds,
        dtype="float16 (use_fp16=True), GPU" if args.gpu else "float32 (use_fp16=False)",
        batch_size=f"256 in-process (FlagEmbedding's default); {BATCH} per request to the server",
    )
    path = model_dir(args.model) if args.model in SPECS else Path(args.model)
    docs = documents(args.docs, args.words)
    started = time.perf_counter()
    if args.only in (None, "in-process"):
        in_process(path, docs, args.rounds, args.gpu)
    if args.only in (None, "server"):
        remote(path, docs, args.rounds)
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
