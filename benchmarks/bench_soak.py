"""A soak: a bounded stream of mixed requests to a real server, for a fixed time.

    python benchmarks/bench_soak.py [--minutes 10] [--concurrency 8] [--model small|mid]

Starts a server on 127.0.0.1 with the plugin and keeps --concurrency clients
busy until the time is up. Each client draws, from a fixed seed:
- 55 % valid requests: one text or a batch of 2-16, in each sparse format,
  with or without dense, tokens and top_k; each answer is checked (200, one
  item per input, the format asked for);
- 25 % failures: bad input refused by the plugin, and texts too long for the
  model, refused by vLLM after the plugin's pre_process;
- 20 % disconnects: the client gives up 10 ms after sending.

Prints requests/s, p50 and p99 latency of the valid requests, the API
server's RSS after warm-up, at the middle and at the end, the growth between
middle and end (goal < 5 %), and the plugin's pending-state size once the
stream stops (bge_m3_sparse_pending_requests on /metrics; goal 0).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _common import documents, model_dir, print_settings
from _server import SERVED_MODEL_NAME, BenchServer, percentile

FORMATS = ["token_weights", "lexical_weights", "indices_values"]
TOO_LONG = "x " * 1100
BAD = [
    {"input": 5},
    {"input": ["ok", 3]},
    {"input": []},
    {"input": "x", "top_k": 0},
    {"input": [0, 10**7, 2]},
    {"input": "x", "sparse_format": "csr"},
]


def draw(rng: random.Random, docs: list[str]) -> tuple[str, dict]:
    roll = rng.random()
    if roll < 0.55:
        texts = rng.sample(docs, rng.choice([1, 1, 2, 4, 8, 16]))
        fmt = rng.choice(FORMATS)
        data: dict = {
            "input": texts[0] if len(texts) == 1 and rng.random() < 0.5 else texts,
            "sparse_format": fmt,
            "return_dense": rng.random() < 0.3,
        }
        if fmt == "token_weights" and rng.random() < 0.5:
            data["return_tokens"] = True
        if rng.random() < 0.3:
            data["top_k"] = rng.randint(1, 20)
        return "ok", data
    if roll < 0.80:
        return "fail", rng.choice([*BAD, {"input": TOO_LONG}, {"input": ["ok", TOO_LONG]}])
    return "disconnect", {"input": rng.sample(docs, 8)}


def check(data: dict, resp: httpx.Response) -> None:
    assert resp.status_code == 200, resp.text[:300]
    items = resp.json()["data"]["data"]
    n = 1 if isinstance(data["input"], str) else len(data["input"])
    assert [it["index"] for it in items] == list(range(n))
    entry = items[0]["sparse_embedding"]
    assert isinstance(entry, dict) == (data["sparse_format"] != "token_weights")
    assert ("dense_embedding" in items[0]) == data["return_dense"]


async def client_loop(
    url: str, seed: int, docs: list[str], deadline: float, latencies: list[float], counts: Counter
) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        while time.monotonic() < deadline:
            kind, data = draw(rng, docs)
            body = {"model": SERVED_MODEL_NAME, "data": data}
            start = time.perf_counter()
            if kind == "disconnect":
                try:
                    await http.post("/pooling", json=body, timeout=httpx.Timeout(120, read=0.01))
                    counts["disconnect answered before the client left"] += 1
                except httpx.ReadTimeout:
                    counts["disconnect"] += 1
                continue
            resp = await http.post("/pooling", json=body)
            if kind == "ok":
                check(data, resp)
                latencies.append(time.perf_counter() - start)
                counts["ok"] += 1
            else:
                assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:300])
                counts["fail (4xx)"] += 1


def pending(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.search(r"^bge_m3_sparse_pending_requests (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else float("nan")


async def soak(
    server: BenchServer, seconds: float, concurrency: int, docs: list[str], rss_start: float
) -> None:
    latencies: list[float] = []
    counts: Counter = Counter()
    rss = {"start": rss_start}

    async def sample_rss() -> None:
        await asyncio.sleep(seconds / 2)
        rss["middle"] = server.rss_mb()

    start = time.monotonic()
    deadline = start + seconds
    await asyncio.gather(
        sample_rss(),
        *(
            client_loop(server.url, i, docs, deadline, latencies, counts)
            for i in range(concurrency)
        ),
    )
    took = time.monotonic() - start
    rss["end"] = server.rss_mb()
    quiet = time.monotonic() + 60
    while pending(server.url) != 0 and time.monotonic() < quiet:
        await asyncio.sleep(0.5)
    sent = sum(counts.values())
    print(f"  {took:.0f} s, {sent} requests ({sent / took:.1f}/s): {dict(counts)}")
    print(
        f"  valid requests: {len(latencies) / took:.1f}/s, p50 {percentile(latencies, 50) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.0f} ms"
    )
    print(
        f"  API server RSS: after warm-up {rss['start']:.0f} MB, middle {rss['middle']:.0f} MB, "
        f"end {rss['end']:.0f} MB; middle to end {100 * (rss['end'] / rss['middle'] - 1):+.2f} % (goal < 5 %)"
    )
    print(f"  pending-state size once the stream stopped: {pending(server.url):g} (goal 0)")
    print(f"  server alive: {server.proc.poll() is None}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="small", choices=["small", "mid"])
    args = parser.parse_args()
    path = model_dir(args.model)
    docs = documents(64, 60)
    print_settings(
        model=f"{args.model} ({path})", minutes=args.minutes, concurrency=args.concurrency
    )
    server = BenchServer(path, Path("/tmp/bench_soak_server.log"))
    try:
        # Warm-up: every kind of request once, so that start-up allocations are done.
        rng = random.Random(-1)
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for _ in range(40):
                _, data = draw(rng, docs)
                http.post("/pooling", json={"model": SERVED_MODEL_NAME, "data": data})
        rss_start = server.rss_mb()
        print("soak:")
        asyncio.run(soak(server, args.minutes * 60, args.concurrency, docs, rss_start))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
