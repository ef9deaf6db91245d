"""What large and abusive requests cost a real server, and other clients meanwhile.

    python benchmarks/bench_abuse.py [--model small|mid] [--body-mb 50] [--long-chars 20000000]
    python benchmarks/bench_abuse.py --worst [--model wide] [--only ColBERT]

``--worst``: on a model of bge-m3's width (hidden size 1024, two layers), the
largest request of each kind that the default limits accept, and what is
refused just past them: an embedding request and a score at the character
cap, ColBERT vectors at their bound and past it, the most pairs. A /health
probe shows how long the API server's event loop is held; the API server's
RSS its memory.

Starts a server on the small model (127.0.0.1 only) twice: with the plugin's
per-request character cap off (BGE_M3_SPARSE_MAX_CHARS set past every case)
and at its default. In each, a probe client sends "I love China" again and
again while one of these is sent:

- max batch: 1,024 texts at the model's maximum length (1,022 one-token
  words and <s> </s>), a request the server must serve;
- 50 MB body: a JSON body of that size, 1,000 texts of 50 KB each, with
  truncation off and with truncate_prompt_tokens;
- long text: one string of --long-chars characters, with truncation off and
  on, and one at the plugin's default cap.

Prints, per case: the status and time of the large request, the API server's
RSS before and at its peak, the engine's peak RSS, and the probe's median and
worst latency during the case against its median when the server is idle.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from _common import documents, model_dir, print_settings
from _server import SERVED_MODEL_NAME, BenchServer, HealthProbe, PeakRss, Probe, percentile

from bge_m3_sparse_plugin._config import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_COLBERT_VALUES,
    DEFAULT_MAX_INPUTS,
    MAX_CHARS_ENV,
)

CAP_OFF = str(10**12)


def cases(body_mb: int, long_chars: int) -> dict[str, dict]:
    per_text = 50_000
    n_texts = body_mb * 1_000_000 // per_text
    big = [("word " * (per_text // 5)) for _ in range(n_texts)]
    long = "x " * (long_chars // 2)
    # 1,021 one-token words, ".", <s> and </s>: 1,024 tokens, the small model's most.
    return {
        "max batch (1,024 x 1,024 tokens)": {"data": {"input": documents(1024, 1021)}},
        f"{body_mb} MB body ({n_texts} x 50 KB texts), truncation off": {"data": {"input": big}},
        f"{body_mb} MB body ({n_texts} x 50 KB texts), truncate_prompt_tokens 512": {
            "data": {"input": big},
            "truncate_prompt_tokens": 512,
        },
        f"long text ({long_chars / 1e6:g} M chars), truncation off": {"data": {"input": long}},
        f"long text ({long_chars / 1e6:g} M chars), truncate_prompt_tokens 512": {
            "data": {"input": long},
            "truncate_prompt_tokens": 512,
        },
        f"long text at the default cap ({DEFAULT_MAX_CHARS / 1e6:g} M chars), truncate_prompt_tokens 512": {
            "data": {"input": "x " * (DEFAULT_MAX_CHARS // 2)},
            "truncate_prompt_tokens": 512,
        },
    }


def worst_cases(hidden: int, max_tokens: int) -> dict[str, dict]:
    """The largest request of each kind that the default limits accept, and
    the same just past them."""
    per_doc = DEFAULT_MAX_CHARS // DEFAULT_MAX_INPUTS - 8
    # Each text its own (a score runs each distinct text once).
    near_cap = [
        f"{i} " + "rivers and mountains " * (per_doc // 21) for i in range(DEFAULT_MAX_INPUTS - 1)
    ]
    tokens = DEFAULT_MAX_COLBERT_VALUES // hidden  # ColBERT vectors at the bound
    per_text = max_tokens - 1  # vectors per text of max_tokens ids (all but the first)
    texts, rest = divmod(tokens, per_text)
    at_bound = [[0, *[5] * (per_text - 1), 2]] * texts + (
        [[0, *[5] * (rest - 1), 2]] if rest else []
    )
    past_bound = [*at_bound, [0, 5, 2]]
    # A score's ColBERT vectors, for the MaxSim: passages of per_text tokens
    # but <s> (words of one token each), under the bound and 16 times past it.
    passage = "sea " * (per_text - 1)
    score_at = [f"{i} " + passage for i in range(max(1, tokens // per_text - 1))]
    score_past = [f"{i} " + passage for i in range(16 * tokens // per_text)]
    return {
        f"score under the ColBERT bound ({len(score_at)} passages of {per_text} tokens)": {
            "data": {"query": "q", "documents": score_at}
        },
        f"score 16x past the ColBERT bound ({len(score_past)} passages; refused)": {
            "data": {"query": "q", "documents": score_past}
        },
        # Each text cut short: the API server's share (parsing, tokenizing,
        # the answer) is what is measured, not the engine's.
        f"embedding at the character cap ({DEFAULT_MAX_INPUTS} texts, "
        f"{DEFAULT_MAX_CHARS / 1e6:g} M chars), truncate_prompt_tokens 16": {
            "data": {"input": [*near_cap, "q"]},
            "truncate_prompt_tokens": 16,
        },
        f"score at the character cap (1 query, {DEFAULT_MAX_INPUTS - 1} documents, "
        f"{DEFAULT_MAX_CHARS / 1e6:g} M chars), passages cut at 16 tokens": {
            "data": {"query": "q", "documents": near_cap, "max_passage_length": 16}
        },
        f"score of {DEFAULT_MAX_INPUTS // 256} pairs of long texts (queries cut at 512 tokens, "
        "passages at the model's length)": {
            "data": {
                "pairs": [
                    [f"query {i} " + "sky " * 4000, f"passage {i} " + "sea " * 4000]
                    for i in range(DEFAULT_MAX_INPUTS // 256)
                ]
            }
        },
        f"{DEFAULT_MAX_INPUTS} pairs, all the same": {
            "data": {"pairs": [["q", "d"]] * DEFAULT_MAX_INPUTS}
        },
        f"{DEFAULT_MAX_INPUTS + 1} pairs (refused)": {
            "data": {"pairs": [["q", "d"]] * (DEFAULT_MAX_INPUTS + 1)}
        },
        f"ColBERT at its bound ({tokens} vectors of {hidden})": {
            "data": {"input": at_bound, "return_colbert_vecs": True, "return_sparse": False}
        },
        "ColBERT one vector past its bound (refused)": {
            "data": {"input": past_bound, "return_colbert_vecs": True, "return_sparse": False}
        },
    }


def measure(server: BenchServer, name: str, request: dict, probe_class: type = Probe) -> None:
    body = json.dumps({"model": SERVED_MODEL_NAME, **request}).encode()
    rss_before = server.rss_mb()
    with (
        PeakRss(server.rss_mb) as api,
        PeakRss(server.engine_rss_mb) as engine,
        probe_class(server.url) as probe,
    ):
        time.sleep(1.0)
        start = time.perf_counter()
        resp = httpx.post(
            server.url + "/pooling",
            content=body,
            timeout=900,
            headers={"Content-Type": "application/json"},
        )
        took = time.perf_counter() - start
        time.sleep(0.5)
    message = (
        "" if resp.status_code == 200 else resp.json().get("error", {}).get("message", "")[:110]
    )
    during = probe.latencies
    print(
        f"  {name}: body {len(body) / 1e6:.1f} MB -> {resp.status_code} in {took:.2f} s {message}"
    )
    print(
        f"    API server RSS {rss_before:.0f} -> peak {api.peak:.0f} MB; engine peak {engine.peak:.0f} MB"
    )
    what = "/health" if probe_class is HealthProbe else "other client"
    print(
        f"    {what} meanwhile: {len(during)} requests, {probe.failures} failed, "
        f"p50 {percentile(during, 50) * 1000:.0f} ms, max {max(during) * 1000:.0f} ms"
    )


def idle_probe(server: BenchServer, probe_class: type = Probe) -> float:
    with probe_class(server.url) as probe:
        time.sleep(3)
    return percentile(probe.latencies, 50)


def worst(model: str, only: str | None = None) -> None:
    path = model_dir(model)
    config = json.loads((path / "config.json").read_text())
    hidden = config["hidden_size"]
    max_tokens = config["max_position_embeddings"] - config["pad_token_id"] - 1
    print_settings(model=f"{model} ({path}), hidden size {hidden}, {max_tokens} tokens")
    server = BenchServer(path, Path("/tmp/bench_abuse_worst.log"))
    try:
        idle = idle_probe(server, HealthProbe)
        print(f"default limits: idle /health p50 {idle * 1000:.1f} ms")
        for name, data in worst_cases(hidden, max_tokens).items():
            if only is None or only in name:
                measure(server, name, data, HealthProbe)
        assert server.proc.poll() is None, "the server died"
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, choices=["small", "mid", "wide"])
    parser.add_argument("--body-mb", type=int, default=50)
    parser.add_argument("--long-chars", type=int, default=20_000_000)
    parser.add_argument(
        "--worst", action="store_true", help="the worst accepted request of each kind"
    )
    parser.add_argument("--only", help="with --worst: the cases whose name holds this")
    args = parser.parse_args()
    if args.worst:
        worst(args.model or "wide", args.only)
        return
    args.model = args.model or "small"
    path = model_dir(args.model)
    print_settings(model=f"{args.model} ({path})")
    requests = cases(args.body_mb, args.long_chars)
    for label, env in (("cap off", {MAX_CHARS_ENV: CAP_OFF}), ("default cap", {})):
        server = BenchServer(path, Path(f"/tmp/bench_abuse_{label.replace(' ', '_')}.log"), env=env)
        try:
            print(f"{label}: idle probe p50 {idle_probe(server) * 1000:.0f} ms")
            for name, data in requests.items():
                measure(server, name, data)
            assert server.proc.poll() is None, "the server died"
        finally:
            server.stop()


if __name__ == "__main__":
    main()
