"""The M3 scores (scores.py), numpy only, against real FlagEmbedding: its
``colbert_score`` and ``compute_lexical_matching_score`` on the same vectors,
and its ``compute_score`` on (query, passage) pairs, from the vectors its own
``encode`` gives for each side."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import ValidationError

from bge_m3_sparse_plugin._embeddings import ThreeOutputs
from bge_m3_sparse_plugin._scores import (
    _lexical_score,
    colbert_score,
    dense_score,
    lexical_matching_score,
    m3_scores,
    pair_scores,
)
from bge_m3_sparse_plugin.schemas import ScoreRequest, describe_validation_error

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
        assert list(got) == list(want)  # compute_score's keys, in its order
        for key in want:
            assert got[key] == pytest.approx(want[key][0], rel=1e-5, abs=1e-6), (query, key)


def test_weights_must_be_three():
    with pytest.raises(ValueError, match=r"weights must be \[w_dense, w_sparse, w_colbert\]"):
        m3_scores(1.0, 1.0, 1.0, [1.0, 1.0])


def test_dense_score_is_the_inner_product():
    a, b = np.linspace(0, 1, 8), np.linspace(1, 0, 8)
    assert dense_score(a, b) == pytest.approx(float(np.dot(a, b)), rel=1e-6)


def _outputs(encoded: dict) -> ThreeOutputs:
    """FlagEmbedding's encode output, as the arrays the server scores from:
    each text's lexical weights in its order, as float32."""
    weights = encoded["lexical_weights"]
    bounds = np.cumsum([0, *map(len, weights)])
    return ThreeOutputs(
        dense=np.asarray(encoded["dense_vecs"], dtype=np.float32),
        sparse_ids=np.array([int(k) for w in weights for k in w], dtype=np.int64),
        sparse_weights=np.array([float(v) for w in weights for v in w.values()], np.float32),
        sparse_bounds=bounds,
        colbert=[np.asarray(c, dtype=np.float32) for c in encoded["colbert_vecs"]],
    )


@pytest.mark.parametrize("weights", [None, [0.4, 0.2, 0.4], [1.0, 0.3, 0.0]])
def test_pair_scores_on_arrays_equal_compute_score(flag_model, weights):
    """The distinct queries, then the distinct passages, and the pairs as
    indices into them, as the server plans a score."""
    queries = sorted({q for q, _ in PAIRS})
    passages = sorted({p for _, p in PAIRS})
    q_out = flag_model.encode(queries, return_sparse=True, return_colbert_vecs=True, max_length=512)
    p_out = flag_model.encode(
        passages, return_sparse=True, return_colbert_vecs=True, max_length=1024
    )
    both = {key: [*q_out[key], *p_out[key]] for key in q_out}
    pairs = [(queries.index(q), passages.index(p)) for q, p in PAIRS]
    got = pair_scores(_outputs(both), len(queries), pairs, weights)
    for (query, passage), scores in zip(PAIRS, got):
        want = flag_model.compute_score(
            [(query, passage)],
            max_query_length=512,
            max_passage_length=1024,
            weights_for_different_modes=weights,
        )
        assert list(scores) == list(want)
        for key in want:
            assert scores[key] == pytest.approx(want[key][0], rel=1e-5, abs=1e-6), (query, key)


def test_the_lexical_score_on_arrays_is_the_loops_to_the_last_bit():
    rng = np.random.default_rng(1)

    def weights(n: int) -> np.ndarray:  # magnitudes far apart, so that the order of sums shows
        return (rng.random(n) * 10.0 ** rng.uniform(-8, 3, n)).astype(np.float32)

    for _ in range(200):
        q_ids = rng.choice(300, size=rng.integers(0, 200), replace=False)
        p_ids = rng.choice(300, size=rng.integers(0, 200), replace=False)
        q_w, p_w = weights(q_ids.size), weights(p_ids.size)
        want = lexical_matching_score(
            dict(zip(map(str, q_ids.tolist()), q_w.tolist())),
            dict(zip(map(str, p_ids.tolist()), p_w.tolist())),
        )
        assert _lexical_score(q_ids, q_w, p_ids, p_w) == want


_WEIGHT = st.floats(min_value=0, allow_nan=False, allow_infinity=False)
_SCORE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.tuples(_WEIGHT, _WEIGHT, _WEIGHT), _SCORE, _SCORE, _SCORE)
def test_every_weights_the_schema_takes_give_finite_scores(weights, dense, sparse, colbert):
    try:
        request = ScoreRequest.model_validate(
            {"query": "q", "documents": ["d"], "weights": weights}
        )
    except ValidationError:
        assume(False)
    scores = m3_scores(dense, sparse, colbert, request.weights)
    assert all(math.isfinite(v) for v in scores.values()), scores
    low, high = min(dense, sparse, colbert), max(dense, sparse, colbert)
    # A weighted mean lies between what it averages (within rounding).
    assert low - 1e-9 * abs(low) <= scores["colbert+sparse+dense"] <= high + 1e-9 * abs(high)


def test_weights_whose_sum_overflows_are_refused_by_name():
    with pytest.raises(ValidationError) as info:
        ScoreRequest.model_validate(
            {"query": "q", "documents": ["d"], "weights": [1e308, 1e308, 1e308]}
        )
    assert describe_validation_error(info.value)[1] == "data.weights"


@pytest.mark.parametrize(
    "modes", [["sparse"], ["dense", "sparse"], ["sparse+dense"], ["colbert+sparse+dense"]]
)
def test_pair_scores_of_some_modes_are_compute_scores_and_need_no_colbert_without_it(
    flag_model, modes
):
    """Only the keys asked, in compute_score's order, each its value; where
    no mode needs ColBERT, outputs without ColBERT vectors score the same."""
    queries, passages = ["I love China"], ["China is a large country", "hi, bge-m3"]
    out = flag_model.encode(
        queries + passages, return_sparse=True, return_colbert_vecs=True, max_length=512
    )
    outputs = _outputs(out)
    got = pair_scores(outputs, 1, [(0, 0), (0, 1)], None, modes)
    for passage, scores in zip(passages, got):
        want = flag_model.compute_score([(queries[0], passage)], max_query_length=512)
        assert list(scores) == [key for key in want if key in modes]
        for key in scores:
            assert scores[key] == pytest.approx(want[key][0], rel=1e-5, abs=1e-6)
    if not any("colbert" in mode for mode in modes):
        no_colbert = ThreeOutputs(**{**vars(outputs), "colbert": []})
        assert pair_scores(no_colbert, 1, [(0, 0), (0, 1)], None, modes) == got


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(ValidationError) as exc:
        ScoreRequest.model_validate({"query": "q", "documents": ["d"], "modes": ["lexical"]})
    message, field = describe_validation_error(exc.value)
    assert field == "data.modes[0]"
    assert "'colbert', 'sparse', 'dense', 'sparse+dense' or 'colbert+sparse+dense'" in message


def test_an_empty_list_of_modes_is_refused_by_name():
    with pytest.raises(ValidationError) as exc:
        ScoreRequest.model_validate({"query": "q", "documents": ["d"], "modes": []})
    assert describe_validation_error(exc.value)[1] == "data.modes"
    one = ScoreRequest.model_validate({"query": "q", "documents": ["d"], "modes": ["dense"]})
    assert one.modes == ["dense"]
