"""What ColBERT costs next to sparse on one server: each request kind sent
the same way, interleaved, on one server started as the README starts it.

    python benchmarks/bench_tasks.py [--model mid|small] [--docs 64] [--rounds 5]

Each round sends the same documents once per kind, in requests of 16
documents, 4 requests at once: sparse; sparse and dense; ColBERT; and all
three (one pass of each document: the README's BgeM3OnePassModel); and
sparse and all three again on a second server that loads the model as vLLM's
own BgeM3EmbeddingModel, as every release before the one-pass model did
(all three: each document twice, embed&token_classify then token_embed).
Prints each kind's median time and documents/s, and its ratio to sparse on
the README's server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _common import documents, interleaved, median, model_dir, print_settings
from _server import GPU_ARGS, SERVED_MODEL_NAME, BenchServer

from bge_m3_sparse_plugin._config import VLLM_ARCHITECTURE

KINDS = {
    "sparse": {},
    "sparse + dense": {"return_dense": True},
    "ColBERT": {"return_sparse": False, "return_colbert_vecs": True},
    "sparse + dense + ColBERT": {"return_dense": True, "return_colbert_vecs": True},
}
PER_REQUEST, CONCURRENCY = 16, 4
BEFORE = ", vLLM's BgeM3EmbeddingModel (two passes)"
BEFORE_KINDS = ("sparse", "sparse + dense + ColBERT")


def send_all(url: str, docs: list[str], flags: dict) -> None:
    def one(batch: list[str]) -> None:
        resp = httpx.post(
            url + "/pooling",
            json={"model": SERVED_MODEL_NAME, "data": {"input": batch, **flags}},
            timeout=600,
        )
        resp.raise_for_status()

    batches = [docs[i : i + PER_REQUEST] for i in range(0, len(docs), PER_REQUEST)]
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(one, batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid", choices=["small", "mid", "realsize"])
    parser.add_argument("--gpu", action="store_true", help="float16, 0.85 of the GPU's memory")
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    path = model_dir(args.model)
    docs = documents(args.docs, args.words)
    print_settings(model=f"{args.model} ({path})", docs=args.docs, words_per_doc=args.words)
    with tempfile.TemporaryDirectory(prefix="bt") as tmp:
        gpu = GPU_ARGS if args.gpu else []
        server = BenchServer(path, Path(tmp) / "server.log", gpu)  # the README's: task embed
        overrides = json.dumps({"architectures": [VLLM_ARCHITECTURE]})
        before = BenchServer(path, Path(tmp) / "before.log", ["--hf-overrides", overrides, *gpu])
        try:
            runs = {name: (server.url, flags) for name, flags in KINDS.items()}
            for name in BEFORE_KINDS:
                runs[name + BEFORE] = (before.url, KINDS[name])
            for url, flags in runs.values():  # warm-up: each kind's shapes once
                send_all(url, docs[:PER_REQUEST], flags)
            times = interleaved(
                {
                    name: (lambda u=url, fl=f: send_all(u, docs, fl))
                    for name, (url, f) in runs.items()
                },
                args.rounds,
            )
        finally:
            server.stop()
            before.stop()
    base = median(times["sparse"])
    for name, values in times.items():
        m = median(values)
        print(
            f"  {name:<60} median {m:6.2f} s  {args.docs / m:7.1f} docs/s  "
            f"{m / base:5.2f}x sparse's time  (rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )
    speed = median(times["sparse" + BEFORE]) / base
    print(f"  sparse on the README's server / on vLLM's model: {speed:.3f}x the speed")
    print(f"  os.cpu_count() = {os.cpu_count()}")


if __name__ == "__main__":
    main()
