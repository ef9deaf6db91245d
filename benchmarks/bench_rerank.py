"""Reranking 100 documents for one query: the plugin's score (one server,
started as the README starts it) against FlagEmbedding's compute_score, side
by side, on the same model, the same documents and the same 2 cores.

    python benchmarks/bench_rerank.py [--model mid|small] [--docs 100] [--words 150] [--rounds 3]

Each round reranks the documents for each query once per path:
- plugin: ``SparseEmbeddingClient.score(query, docs)``: the server scores,
  64 documents per request (2 requests for 100), the query in each; on the
  README's server (vLLM's default binding: the engine computes on one core, the
  other is kept for the front end), and on one whose engine is bound to both
  cores (``bge-m3-sparse cpu-env``'s binding), as FlagEmbedding uses both;
  each text runs once for all three outputs (the README's BgeM3OnePassModel),
  and the request asks for the one mode it ranks by; on the second server,
  also ``sparse+dense`` alone, which computes no ColBERT vector;
- FlagEmbedding: ``BGEM3FlagModel.compute_score([(query, doc) for doc in
  docs], max_passage_length=<the model's length>)``, fp32, its default batch
  of 256 pairs (it encodes the query once per pair, as it is written).

Also checks, once, that the two orders agree. Prints each path's median time,
documents/s and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import CPU_ENGINE_ENV, documents, interleaved, median, model_dir, print_settings
from _server import BenchServer

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

MODE = "colbert+sparse+dense"
PASSAGE_LENGTH = 1024  # the small models' positions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid", choices=["small", "mid"])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--words", type=int, default=150)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    path = model_dir(args.model)
    docs = documents(args.docs, args.words)
    queries = [" ".join(d.split()[:8]) for d in documents(args.queries, 20, seed=1)]
    print_settings(
        model=f"{args.model} ({path})", docs=args.docs, words_per_doc=args.words, queries=queries
    )

    from FlagEmbedding import BGEM3FlagModel

    flag = BGEM3FlagModel(str(path), use_fp16=False, devices="cpu")

    def flag_scores(query: str) -> list[float]:
        got = flag.compute_score([(query, d) for d in docs], max_passage_length=PASSAGE_LENGTH)
        return list(got[MODE])

    with tempfile.TemporaryDirectory(prefix="br") as tmp:
        server = BenchServer(path, Path(tmp) / "server.log")
        both = BenchServer(path, Path(tmp) / "both.log", env=CPU_ENGINE_ENV)
        try:
            with (
                SparseEmbeddingClient(server.url, timeout=600) as client,
                SparseEmbeddingClient(both.url, timeout=600) as both_client,
            ):

                def plugin_scores(
                    query: str, c: SparseEmbeddingClient = client, mode: str = MODE
                ) -> list[float]:
                    return [s[mode] for s in c.score(query, docs, modes=[mode])]

                # Warm-up, and the check that both rank alike.
                for query in queries[:1]:
                    mine, theirs = plugin_scores(query), flag_scores(query)
                    order = sorted(range(len(docs)), key=lambda i: -mine[i])
                    same = order == sorted(range(len(docs)), key=lambda i: -theirs[i])
                    worst = max(abs(a - b) for a, b in zip(mine, theirs))
                    print(f"  same order as compute_score: {same}; largest difference {worst:.2e}")
                times = interleaved(
                    {
                        "plugin, README's server": lambda: [plugin_scores(q) for q in queries],
                        "plugin, engine on 2 cores": lambda: [
                            plugin_scores(q, both_client) for q in queries
                        ],
                        "plugin, engine on 2 cores, sparse+dense": lambda: [
                            plugin_scores(q, both_client, "sparse+dense") for q in queries
                        ],
                        "FlagEmbedding compute_score": lambda: [flag_scores(q) for q in queries],
                    },
                    args.rounds,
                )
        finally:
            server.stop()
            both.stop()
    reranked = args.docs * len(queries)
    base = median(times["FlagEmbedding compute_score"])
    for name, values in times.items():
        m = median(values)
        print(
            f"  {name:<40} median {m:7.2f} s  {reranked / m:7.1f} docs/s  "
            f"{base / m:5.2f}x FlagEmbedding's speed  (rounds: {', '.join(f'{v:.2f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
