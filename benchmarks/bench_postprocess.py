"""Post-processing alone: the plugin's arithmetic against FlagEmbedding's per-token loop.

    python benchmarks/bench_postprocess.py

Same arrays for both: 1,000 sequences x 512 tokens, ids drawn from bge-m3's
vocabulary size with a skew (so ids repeat within a sequence), <s>/</s> at the
ends and specials sprinkled inside, weights half negative. Prints the ratio of
median times over interleaved rounds and checks the results are identical.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import interleaved, median, print_settings

from bge_m3_sparse_plugin import sparse
from bge_m3_sparse_plugin._sparse import lexical_weights_batch

sys.path.insert(
    0, str(Path(__file__).parent.parent)
)  # the repository, for tests/support/reference.py
import itertools

from tests.support.reference import flagembedding_loop as _flagembedding_loop

N_SEQ, SEQ_LEN, VOCAB, ROUNDS = 1000, 512, 250002, 7
SPECIAL = frozenset({0, 1, 2, 3})


def flagembedding_loop(token_weights, input_ids):
    """FlagEmbedding 1.4.2's _process_token_weights: the project's one copy
    (tests/support/reference.py, checked against FlagEmbedding's source by
    tests/test_reference.py), given the unused-token set that FlagEmbedding
    rebuilds from the tokenizer on every call."""
    return _flagembedding_loop(token_weights, input_ids, SPECIAL)


def make_arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = (rng.zipf(1.3, size=(N_SEQ, SEQ_LEN)) + 3) % VOCAB
    ids[rng.random((N_SEQ, SEQ_LEN)) < 0.01] = 3  # <unk>
    ids[rng.random((N_SEQ, SEQ_LEN)) < 0.005] = 2  # literal </s>
    ids[:, 0], ids[:, -1] = 0, 2
    weights = rng.normal(0.0, 0.2, size=(N_SEQ, SEQ_LEN)).astype(np.float32)
    return ids, weights


def main() -> None:
    ids, weights = make_arrays()
    id_lists = [row.tolist() for row in ids]  # FlagEmbedding's input: Python lists
    ids_rows, w_rows = list(ids), list(weights)  # the plugin's: one array per sequence
    print_settings(
        sequences=N_SEQ,
        tokens_per_sequence=SEQ_LEN,
        vocab=VOCAB,
        dtype="float32",
        rounds=ROUNDS,
        numpy=np.__version__,
        repeats_per_sequence=f"{SEQ_LEN - np.mean([len(set(r)) for r in id_lists]):.0f} on average",
    )

    def flag():
        return [flagembedding_loop(w, i) for w, i in zip(w_rows, id_lists)]

    def plugin_batch(flat):
        def run():
            lengths = np.fromiter(map(len, ids_rows), dtype=np.int64, count=len(ids_rows))
            out_ids, out_w, bounds = flat(
                np.concatenate(ids_rows), np.concatenate(w_rows), lengths, SPECIAL
            )
            edges = bounds.tolist()
            return [(out_ids[a:b], out_w[a:b]) for a, b in itertools.pairwise(edges)]

        return run

    sparse.lexical_weights_flat_compiled(
        ids[0], weights[0], np.array([SEQ_LEN]), SPECIAL
    )  # compile
    paths = {
        "plugin_compiled": plugin_batch(sparse.lexical_weights_flat_compiled),
        "plugin_numpy": plugin_batch(sparse.lexical_weights_flat_numpy),
    }
    want = flag()
    identical = {
        name: all(
            list(zip(map(str, i.tolist()), w.tolist())) == [(k, float(v)) for k, v in ref.items()]
            for (i, w), ref in zip(run(), want)
        )
        for name, run in paths.items()
    }
    # What the processor calls: the compiled pass once ready.
    assert sparse.compiled_ready() and lexical_weights_batch is not None
    times = interleaved({"flagembedding_loop": flag, **paths}, ROUNDS)
    t_flag = median(times["flagembedding_loop"])
    print(f"identical results: {identical}")
    print(f"flagembedding loop: median {t_flag * 1e3:.1f} ms")
    for name in paths:
        t = median(times[name])
        goal = " (goal >= 20x)" if name == "plugin_compiled" else ""
        print(
            f"{name:<16}    median {t * 1e3:.1f} ms, ratio flagembedding/plugin: {t_flag / t:.1f}x{goal}"
        )
    if not all(identical.values()):
        raise SystemExit("results differ")


if __name__ == "__main__":
    main()
