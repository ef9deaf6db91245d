"""The server's throughput and latency under concurrency: valid requests only.

    python benchmarks/bench_serve.py [--model small|mid|realsize|FOLDER] [--concurrency 1 8 32]
                                     [--seconds 20] [--texts 8] [--words 100]

Starts the plugin's server (the tests' command line; on a GPU, float16 and
--gpu-memory-utilization 0.85), warms it up, then for each concurrency keeps
that many clients busy for --seconds, each sending requests of --texts texts
(sparse as indices_values and dense) and checking each answer. Prints, per
concurrency: requests/s, documents/s, tokens/s and the p50 and p99 latency.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _common import SPECS, documents, model_dir, print_settings
from _server import GPU_ARGS, SERVED_MODEL_NAME, BenchServer, percentile


async def client(
    url: str, batches: list[list[str]], first: int, deadline: float, latencies: list[float]
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        i = first
        while time.monotonic() < deadline:
            texts = batches[i % len(batches)]
            i += 1
            body = {
                "model": SERVED_MODEL_NAME,
                "data": {"input": texts, "sparse_format": "indices_values", "return_dense": True},
            }
            start = time.perf_counter()
            resp = await http.post("/pooling", json=body)
            took = time.perf_counter() - start
            resp.raise_for_status()
            items = resp.json()["data"]["data"]
            if [item["index"] for item in items] != list(range(len(texts))):
                raise AssertionError(f"{len(texts)} texts sent, {len(items)} back")
            latencies.append(took)


async def load(url: str, batches: list[list[str]], concurrency: int, seconds: float) -> tuple:
    latencies: list[float] = []
    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(
        *(client(url, batches, c * 7, deadline, latencies) for c in range(concurrency))
    )
    return latencies, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--texts", type=int, default=8)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--gpu", action="store_true", help="float16, 0.85 of the GPU's memory")
    args = parser.parse_args()
    path = model_dir(args.model) if args.model in SPECS else Path(args.model)
    docs = documents(512, args.words)
    batches = [docs[i : i + args.texts] for i in range(0, len(docs), args.texts)]
    print_settings(
        model=str(path),
        texts_per_request=args.texts,
        tokens_per_text=args.words + 3,
        seconds_per_level=args.seconds,
        server_args=GPU_ARGS if args.gpu else "the tests' (CPU, float32)",
    )
    with tempfile.TemporaryDirectory() as tmp:
        server = BenchServer(path, Path(tmp) / "server.log", GPU_ARGS if args.gpu else [])
        try:
            asyncio.run(load(server.url, batches, 4, min(5.0, args.seconds)))  # warm-up
            print(
                f"{'clients':>7} {'requests/s':>11} {'docs/s':>8} {'tokens/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
            )
            for concurrency in args.concurrency:
                latencies, took = asyncio.run(load(server.url, batches, concurrency, args.seconds))
                rate = len(latencies) / took
                print(
                    f"{concurrency:>7} {rate:11.1f} {rate * args.texts:8.1f} "
                    f"{rate * args.texts * (args.words + 3):9.0f} "
                    f"{percentile(latencies, 50) * 1000:8.1f} {percentile(latencies, 99) * 1000:8.1f}"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
