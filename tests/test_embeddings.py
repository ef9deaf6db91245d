"""Pooled outputs to response items (embeddings.py), without vLLM: outputs laid
out as vLLM's BgeM3EmbeddingModel lays them out, each item compared whole with
FlagEmbedding's loop (tests/support/reference.py) and the dense slice it came from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bge_m3_sparse_plugin._embeddings import Model, embedding_items
from bge_m3_sparse_plugin.schemas import SparseEmbeddingRequest

from .support.reference import reference_lexical_weights, reference_prune

BOS, EOS, PAD, UNK = 0, 2, 1, 3
HIDDEN = 4
MODEL = Model(
    hidden_size=HIDDEN,
    bos_token_id=BOS,
    eos_token_id=EOS,
    skip_ids=frozenset({BOS, EOS, PAD, UNK}),
    decode=lambda ids: [f"t{i}" for i in ids],
)
# Repeats (the max weight wins), an unk, and a zero weight (dropped).
PROMPTS = [[BOS, 7, 8, 7, EOS], [BOS, 9, UNK, 11, 12, 9, EOS], [BOS, 5, EOS]]


def pooled_outputs(seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Each prompt's output (dense, then a weight per token but BOS and EOS),
    with the dense and weight parts apart for the expectations."""
    rng = np.random.default_rng(seed)
    dense, weights = [], []
    for ids in PROMPTS:
        dense.append(rng.standard_normal(HIDDEN).astype(np.float32))
        w = rng.uniform(0, 2, len(ids) - 2).astype(np.float32)
        w[-1] = 0.0 if len(w) > 3 else w[-1]
        weights.append(w)
    return [np.concatenate(p) for p in zip(dense, weights)], dense, weights


def expected_entries(weights: np.ndarray, ids: list[int], top_k=None, min_weight=None):
    lexical = reference_lexical_weights(weights.tolist(), ids[1:-1], MODEL.skip_ids)
    return reference_prune(list(lexical.items()), top_k, min_weight)


@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "torch"])
def test_sparse_and_dense_items_equal_the_reference(as_tensor):
    pooled, dense, weights = pooled_outputs()
    if as_tensor:
        pooled = [torch.from_numpy(p) for p in pooled]
    request = SparseEmbeddingRequest(
        input=["x"] * 3, return_dense=True, sparse_format="indices_values"
    )
    items = embedding_items(PROMPTS, pooled, request, ("embed&token_classify",), MODEL)
    got = [item.model_dump() for item in items]
    want = []
    for i, ids in enumerate(PROMPTS):
        entries = expected_entries(weights[i], ids)
        want.append(
            {
                "index": i,
                "object": "sparse-embedding",
                "sparse_embedding": {
                    "indices": [t for t, _ in entries],
                    "values": [w for _, w in entries],
                },
                "dense_embedding": dense[i].tolist(),
            }
        )
    assert got == want
    assert all(got[i]["sparse_embedding"]["indices"] for i in range(3))


def test_pruning_and_tokens_are_applied_per_item():
    pooled, _, weights = pooled_outputs(seed=1)
    request = SparseEmbeddingRequest(input=["x"] * 3, return_tokens=True, top_k=2, min_weight=0.3)
    items = embedding_items(PROMPTS, pooled, request, ("embed&token_classify",), MODEL)
    for i, ids in enumerate(PROMPTS):
        entries = expected_entries(weights[i], ids, top_k=2, min_weight=0.3)
        assert items[i].model_dump()["sparse_embedding"] == [
            {"token_id": t, "weight": w, "token": f"t{t}"} for t, w in entries
        ]
        assert items[i].dense_embedding is None


def test_a_sparse_only_task_and_a_dense_only_task_each_give_their_part():
    pooled, dense, weights = pooled_outputs(seed=2)
    sparse_only = [p[HIDDEN:] for p in pooled]
    request = SparseEmbeddingRequest(input=["x"] * 3, sparse_format="lexical_weights")
    items = embedding_items(PROMPTS, sparse_only, request, ("token_classify",), MODEL)
    for i, ids in enumerate(PROMPTS):
        want = {str(t): w for t, w in expected_entries(weights[i], ids)}
        assert items[i].sparse_embedding == want
    dense_request = SparseEmbeddingRequest(input=["x"] * 3, return_sparse=False, return_dense=True)
    items = embedding_items(PROMPTS, dense, dense_request, ("embed",), MODEL)
    assert [item.model_dump() for item in items] == [
        {"index": i, "object": "sparse-embedding", "dense_embedding": d.tolist()}
        for i, d in enumerate(dense)
    ]


def test_colbert_items_are_each_outputs_rows():
    rows = [np.arange(6, dtype=np.float32).reshape(3, 2), torch.ones(2, 2)]
    request = SparseEmbeddingRequest(
        input=["x", "y"], return_sparse=False, return_colbert_vecs=True
    )
    items = embedding_items(
        [[BOS, 5, 6, 7, EOS], [BOS, 5, 6, EOS]], rows, request, ("token_embed",), MODEL
    )
    assert [item.model_dump() for item in items] == [
        {
            "index": 0,
            "object": "sparse-embedding",
            "colbert_vecs": [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]],
        },
        {"index": 1, "object": "sparse-embedding", "colbert_vecs": [[1.0, 1.0], [1.0, 1.0]]},
    ]


def test_colbert_beside_sparse_and_dense_comes_from_a_second_run_of_the_inputs():
    """A request for all three runs each input twice (tasks_for): the first
    run's outputs give sparse and dense, the second's ColBERT; each item holds
    its own input's three."""
    pooled, dense, weights = pooled_outputs(seed=3)
    rows = [np.full((len(ids) - 1, 2), i, dtype=np.float32) for i, ids in enumerate(PROMPTS)]
    request = SparseEmbeddingRequest(
        input=["x"] * 3, return_dense=True, return_colbert_vecs=True, sparse_format="indices_values"
    )
    items = embedding_items(
        PROMPTS * 2, pooled + rows, request, ("embed&token_classify", "token_embed"), MODEL
    )
    want = []
    for i, ids in enumerate(PROMPTS):
        entries = expected_entries(weights[i], ids)
        want.append(
            {
                "index": i,
                "object": "sparse-embedding",
                "sparse_embedding": {
                    "indices": [t for t, _ in entries],
                    "values": [w for _, w in entries],
                },
                "dense_embedding": dense[i].tolist(),
                "colbert_vecs": rows[i].tolist(),
            }
        )
    assert [item.model_dump() for item in items] == want


@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "torch"])
def test_all_three_from_one_pass_equal_the_two_runs(as_tensor):
    """The plugin's model appends each input's ColBERT vectors (one per token
    but BOS) to the dense vector and the weights: the items are those of the
    two runs' outputs. A prompt without EOS (cut) keeps its last weight."""
    prompts = [*PROMPTS, [BOS, 7, 9]]
    rng = np.random.default_rng(5)
    first, rows = [], []
    for ids in prompts:
        weights = len(ids) - 1 - (ids[-1] == EOS)
        first.append(rng.uniform(0, 2, HIDDEN + weights).astype(np.float32))
        rows.append(rng.standard_normal((len(ids) - 1, HIDDEN)).astype(np.float32))
    one = [np.concatenate([f, r.reshape(-1)]) for f, r in zip(first, rows)]
    if as_tensor:
        one = [torch.from_numpy(p) for p in one]
    request = SparseEmbeddingRequest(
        input=["x"] * 4, return_dense=True, return_colbert_vecs=True, return_tokens=True
    )
    two = embedding_items(
        prompts * 2, first + rows, request, ("embed&token_classify", "token_embed"), MODEL
    )
    got = embedding_items(prompts, one, request, ("embed&token_classify&token_embed",), MODEL)
    assert [item.model_dump() for item in got] == [item.model_dump() for item in two]
    assert [item.colbert_vecs for item in got] == [r.tolist() for r in rows]


def test_a_one_pass_output_of_the_wrong_length_is_refused_saying_what_was_expected():
    ids = [BOS, 7, 8, EOS]
    short = np.zeros(HIDDEN + 2 + 3 * HIDDEN - 1, dtype=np.float32)
    request = SparseEmbeddingRequest(input=["x"], return_colbert_vecs=True)
    with pytest.raises(
        ValueError, match=r"returned 17 values .* expected 18 .* 2 token weights and 3 vectors of 4"
    ):
        embedding_items([ids], [short], request, ("embed&token_classify&token_embed",), MODEL)
