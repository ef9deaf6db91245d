"""vLLM + plugin against FlagEmbedding, end to end, on the same cores.

    python benchmarks/bench_vs_flagembedding.py [--sizes small,mid] [--docs 200] [--words 254]

For each model size (the small test model; a mid one with hidden 768, 6 layers,
12 heads), the same documents go through
- FlagEmbedding: BGEM3FlagModel.encode(docs, return_dense=True, return_sparse=True), fp32;
- vLLM + plugin: llm.encode({"data": {"input": docs, "return_dense": True}}), fp32,
  once with vLLM's default CPU settings and once with this project's
  (benchmarks/_common.py: CPU_ENGINE_ENV).
Each vLLM engine lives in its own worker process, started before timing;
rounds alternate between the contenders and the medians are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    CPU_ENGINE_ENV,
    documents,
    llm_kwargs,
    median,
    model_dir,
    print_settings,
)

ENGINE_KW = {"max_num_batched_tokens": 16384, "max_num_seqs": 256}


def worker(path: str, n_docs: int, words: int) -> None:
    """Serve timing requests on stdin: one line in, one JSON line out."""
    from vllm import LLM

    llm = LLM(
        **llm_kwargs(path),
        **ENGINE_KW,
    )
    request = {"data": {"input": documents(n_docs, words), "return_dense": True}}
    llm.encode(request, pooling_task="plugin", use_tqdm=False)  # warm-up
    out = sys.__stdout__
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for _ in sys.stdin:
        start = time.perf_counter()
        llm.encode(request, pooling_task="plugin", use_tqdm=False)
        out.write(json.dumps({"seconds": time.perf_counter() - start}) + "\n")
        out.flush()
    llm.llm_engine.engine_core.shutdown()


class Worker:
    def __init__(self, path: Path, n_docs: int, words: int, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--worker",
                str(path),
                "--docs",
                str(n_docs),
                "--words",
                str(words),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self._read()  # ready

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"worker exited with {self.proc.wait()}")

    def run(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read()["seconds"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


def bench_size(size: str, n_docs: int, words: int, rounds: int) -> dict[str, float]:
    import torch
    from FlagEmbedding import BGEM3FlagModel

    path = model_dir(size)
    docs = documents(n_docs, words)
    flag = BGEM3FlagModel(str(path), use_fp16=False, devices="cpu")
    default_env = {k: v for k, v in os.environ.items() if k not in CPU_ENGINE_ENV}
    tuned_env = {**default_env, **CPU_ENGINE_ENV}
    # Engines start one at a time, before any timing.
    workers = {
        "vllm_default": Worker(path, n_docs, words, default_env),
        "vllm_tuned": Worker(path, n_docs, words, tuned_env),
    }

    def run_flag() -> float:
        start = time.perf_counter()
        flag.encode(docs, return_dense=True, return_sparse=True, batch_size=32, max_length=1024)
        return time.perf_counter() - start

    run_flag()  # warm-up
    times: dict[str, list[float]] = {"flagembedding": [], **{k: [] for k in workers}}
    for _ in range(rounds):
        times["flagembedding"].append(run_flag())
        for name, w in workers.items():
            times[name].append(w.run())
    for w in workers.values():
        w.close()
    result = {name: median(t) for name, t in times.items()}
    print(f"[{size}] torch threads for FlagEmbedding: {torch.get_num_threads()}")
    for name, t in result.items():
        print(
            f"[{size}] {name:14s} median {t:7.2f} s  {n_docs / t:6.1f} docs/s  (all: "
            + ", ".join(f"{x:.2f}" for x in times[name])
            + ")"
        )
    for name in workers:
        print(
            f"[{size}] throughput {name} / flagembedding: {result['flagembedding'] / result[name]:.2f}x"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="small,mid")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--words", type=int, default=254, help="words per doc; one token each")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.docs, args.words)
    print_settings(
        docs=args.docs,
        tokens_per_doc=args.words + 3,
        dtype="float32",
        rounds=args.rounds,
        sizes=args.sizes,
        engine_kwargs=ENGINE_KW,
        tuned_env=CPU_ENGINE_ENV,
        cores="FlagEmbedding: torch's threads (all cores); vLLM default: 1 core computes, "
        "1 reserved; vLLM tuned: all cores compute",
    )
    for size in args.sizes.split(","):
        bench_size(size, args.docs, args.words, args.rounds)


if __name__ == "__main__":
    main()
