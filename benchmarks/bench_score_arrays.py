"""What a score costs the API server after the engine: arrays against lists.

    python benchmarks/bench_score_arrays.py [--passages 64] [--tokens 500] [--hidden 1024]

One rerank request's engine output, made up as vLLM gives it (float32
tensors: for each text the dense vector and its token weights, then its
ColBERT vectors), scored two ways, interleaved in one process:

- lists: each text's outputs as response items (the ColBERT vectors as
  Python lists of floats, sparse as FlagEmbedding's dict), then each pair's
  scores from them, as the plugin scored before;
- arrays: ``three_outputs`` and ``pair_scores``, what the plugin runs now.

Prints each way's median time, its peak of Python memory in one more run
(tracemalloc, which counts numpy's arrays too),
and checks that both give the same scores.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np
import torch

from bge_m3_sparse_plugin._embeddings import Model, embedding_items, three_outputs
from bge_m3_sparse_plugin._scores import (
    colbert_score,
    dense_score,
    lexical_matching_score,
    m3_scores,
    pair_scores,
)
from bge_m3_sparse_plugin._tasks import SCORE_TASKS
from bge_m3_sparse_plugin.schemas import SparseEmbeddingRequest

BOS, EOS = 0, 2


def engine_output(
    n_texts: int, tokens: list[int], hidden: int, seed: int = 0
) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Token ids and pooled outputs of SCORE_TASKS: sparse and dense, then ColBERT."""
    rng = np.random.default_rng(seed)
    ids = [[BOS, *rng.integers(5, 5000, size=n - 2).tolist(), EOS] for n in tokens[:n_texts]]
    first = []
    for row in ids:
        dense = rng.standard_normal(hidden).astype(np.float32)
        dense /= np.linalg.norm(dense)
        weights = np.maximum(rng.standard_normal(len(row) - 2), 0).astype(np.float32)
        first.append(torch.from_numpy(np.concatenate([dense, weights])))
    colbert = []
    for row in ids:
        vecs = rng.standard_normal((len(row) - 1, hidden)).astype(np.float32)
        colbert.append(torch.from_numpy(vecs / np.linalg.norm(vecs, axis=1, keepdims=True)))
    return ids + ids, first + colbert


def by_lists(ids, pooled, model, n_queries, pairs) -> list[dict[str, float]]:
    request = SparseEmbeddingRequest.model_construct(
        input="",
        return_tokens=False,
        return_sparse=True,
        return_dense=True,
        return_colbert_vecs=True,
        sparse_format="lexical_weights",
        top_k=None,
        min_weight=None,
    )
    items = embedding_items(ids, pooled, request, SCORE_TASKS, model)
    queries, passages = items[:n_queries], items[n_queries:]
    return [
        m3_scores(
            dense_score(queries[q].dense_embedding, passages[p].dense_embedding),
            lexical_matching_score(queries[q], passages[p]),
            colbert_score(queries[q].colbert_vecs, passages[p].colbert_vecs),
        )
        for q, p in pairs
    ]


def by_arrays(ids, pooled, model, n_queries, pairs) -> list[dict[str, float]]:
    return pair_scores(three_outputs(ids, pooled, model), n_queries, pairs)


def timed(fn, *args) -> tuple[float, list]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def peak_mb(fn, *args) -> float:
    """The peak of memory that Python allocates (numpy's arrays included) in one run."""
    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--query-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model = Model(
        hidden_size=args.hidden,
        bos_token_id=BOS,
        eos_token_id=EOS,
        skip_ids=frozenset({BOS, EOS, 1, 3}),
        decode=lambda ids: [str(i) for i in ids],
    )
    n = 1 + args.passages
    ids, pooled = engine_output(n, [args.query_tokens] + [args.tokens] * args.passages, args.hidden)
    pairs = [(0, p) for p in range(args.passages)]
    print(
        f"1 query of {args.query_tokens} tokens, {args.passages} passages of {args.tokens} tokens, "
        f"hidden size {args.hidden}, {args.rounds} rounds interleaved"
    )
    ways = {"lists": by_lists, "arrays": by_arrays}
    times: dict[str, list[float]] = {name: [] for name in ways}
    results = {}
    for _ in range(args.rounds):
        for name, fn in ways.items():
            took, results[name] = timed(fn, ids, pooled, model, 1, pairs)
            times[name].append(took)
    peaks = {name: peak_mb(fn, ids, pooled, model, 1, pairs) for name, fn in ways.items()}
    for a, b in zip(results["lists"], results["arrays"]):
        for key in a:
            assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, abs(a[key])), (key, a[key], b[key])
    for name in times:
        median = statistics.median(times[name])
        print(
            f"  {name:6}: {median * 1000:8.1f} ms a request ({median / args.passages * 1000:.2f} ms "
            f"a pair), peak Python memory {peaks[name]:.1f} MB"
        )
    ratio = statistics.median(times["lists"]) / statistics.median(times["arrays"])
    print(
        f"  arrays against lists: {ratio:.1f}x as fast; peak memory {peaks['lists']:.1f} "
        f"against {peaks['arrays']:.1f} MB"
    )
    print("  the same scores both ways (1e-5 relative)")


if __name__ == "__main__":
    main()
