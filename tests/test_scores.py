"""The M3 scores (scores.py), numpy only, against real FlagEmbedding: its
``colbert_score`` and ``compute_lexical_matching_score`` on the same vectors,
and its ``compute_score`` on (query, passage) pairs, from the vectors its own
``encode`` gives for each side."""

from __future__ import annotations

import numpy as np
import pytest

from bge_m3_sparse_plugin._scores import (
    SCORE_KEYS,
    colbert_score,
    dense_score,
    lexical_matching_score,
    m3_scores,
)

PAIRS = [
    ("I love China", "China is a large country"),
    ("hi, bge-m3", "The search engine ranks every document by its sparse and dense score."),
    ("sparse and dense", "I love China"),
]


def test_colbert_score_is_flagembeddings_on_the_same_vectors(flag_model):
    rng = np.random.default_rng(0)
    for n, m in [(1, 1), (3, 7), (12, 5)]:
        q = rng.standard_normal((n, 16)).astype(np.float32)
        p = rng.standard_normal((m, 16)).astype(np.float32)
        want = float(flag_model.colbert_score(q, p))
        assert colbert_score(q, p) == pytest.approx(want, rel=1e-6, abs=1e-7)


def test_colbert_score_names_bad_shapes():
    with pytest.raises(ValueError, match=r"two non-empty \(n, d\) arrays of one d"):
        colbert_score(np.ones((2, 3)), np.ones((2, 4)))


@pytest.mark.parametrize("weights", [None, [0.4, 0.2, 0.4], [1.0, 0.3, 0.0]])
def test_the_five_keys_equal_compute_score_pair_by_pair(flag_model, weights):
    """Each pair alone (compute_score pads a batch of pairs, and a padded
    passage position adds a zero vector to ColBERT's max)."""
    for query, passage in PAIRS:
        want = flag_model.compute_score(
            [(query, passage)],
            max_query_length=512,
            max_passage_length=1024,
            weights_for_different_modes=weights,
        )
        q = flag_model.encode([query], return_sparse=True, return_colbert_vecs=True, max_length=512)
        p = flag_model.encode(
            [passage], return_sparse=True, return_colbert_vecs=True, max_length=1024
        )
        got = m3_scores(
            dense_score(q["dense_vecs"][0], p["dense_vecs"][0]),
            lexical_matching_score(q["lexical_weights"][0], p["lexical_weights"][0]),
            colbert_score(q["colbert_vecs"][0], p["colbert_vecs"][0]),
            weights,
        )
        assert list(got) == list(SCORE_KEYS)
        for key in SCORE_KEYS:
            assert got[key] == pytest.approx(want[key][0], rel=1e-5, abs=1e-6), (query, key)


def test_weights_must_be_three():
    with pytest.raises(ValueError, match=r"weights must be \[w_dense, w_sparse, w_colbert\]"):
        m3_scores(1.0, 1.0, 1.0, [1.0, 1.0])


def test_dense_score_is_the_inner_product():
    a, b = np.linspace(0, 1, 8), np.linspace(1, 0, 8)
    assert dense_score(a, b) == pytest.approx(float(np.dot(a, b)), rel=1e-6)
