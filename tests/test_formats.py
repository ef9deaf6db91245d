"""The three sparse formats and the lexical matching score, without an engine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from FlagEmbedding import BGEM3FlagModel
from hypothesis import given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin._formats import format_sparse, weight_dict
from bge_m3_sparse_plugin._scores import lexical_matching_score
from bge_m3_sparse_plugin.schemas import SparseEmbeddingItem

IDS = [87, 5, 1200]
WEIGHTS = [0.5, 0.25, 0.125]
TOKENS = ["I", "love", "China"]


def flag_score(a: dict, b: dict):
    # The method does not use self.
    return BGEM3FlagModel.compute_lexical_matching_score(None, a, b)


def test_the_three_formats():
    assert format_sparse(IDS, WEIGHTS, TOKENS, "token_weights") == [
        {"token_id": 87, "weight": 0.5, "token": "I"},
        {"token_id": 5, "weight": 0.25, "token": "love"},
        {"token_id": 1200, "weight": 0.125, "token": "China"},
    ]
    assert format_sparse(IDS, WEIGHTS, None, "token_weights")[0] == {
        "token_id": 87,
        "weight": 0.5,
        "token": None,
    }
    lexical = format_sparse(IDS, WEIGHTS, None, "lexical_weights")
    assert list(lexical.items()) == [("87", 0.5), ("5", 0.25), ("1200", 0.125)]
    assert format_sparse(IDS, WEIGHTS, None, "indices_values") == {
        "indices": [87, 5, 1200],
        "values": [0.5, 0.25, 0.125],
    }
    with pytest.raises(ValueError, match="sparse_format must be one of"):
        format_sparse(IDS, WEIGHTS, None, "csr")


@pytest.mark.parametrize("fmt", ["token_weights", "lexical_weights", "indices_values"])
def test_weight_dict_reads_every_format_and_the_response_item(fmt):
    sparse = format_sparse(IDS, WEIGHTS, TOKENS if fmt == "token_weights" else None, fmt)
    want = {"87": 0.5, "5": 0.25, "1200": 0.125}
    assert list(weight_dict(sparse).items()) == list(want.items())
    item = SparseEmbeddingItem.model_validate({"index": 0, "sparse_embedding": sparse})
    assert list(weight_dict(item).items()) == list(want.items())


def test_weight_dict_reads_objects_with_indices_and_values():
    # As vector-database clients hold sparse vectors (Qdrant's SparseVector, say).
    vector = SimpleNamespace(indices=[87, 5], values=[0.5, 0.25])
    assert list(weight_dict(vector).items()) == [("87", 0.5), ("5", 0.25)]


def test_weight_dict_refuses_what_it_cannot_read():
    with pytest.raises(TypeError, match="expected token_weights"):
        weight_dict(3.0)
    with pytest.raises(ValueError, match="2 indices but 1 values"):
        weight_dict({"indices": [1, 2], "values": [0.5]})
    with pytest.raises(ValueError, match="no sparse embedding"):
        weight_dict(SparseEmbeddingItem(index=0))


def test_score_equals_flagembedding_on_its_own_dicts():
    query = {"87": np.float32(0.5), "5": np.float32(0.3), "9": np.float32(0.2)}
    doc = {"5": np.float32(0.7), "87": np.float32(0.1), "11": np.float32(0.9)}
    want = flag_score(query, doc)
    assert lexical_matching_score(query, doc) == want
    assert (
        lexical_matching_score(query, {"1": np.float32(1.0)}) == flag_score(query, {"1": 1.0}) == 0
    )


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(4, 40), st.floats(0.0625, 2, width=32), max_size=15),
    st.dictionaries(st.integers(4, 40), st.floats(0.0625, 2, width=32), max_size=15),
    st.sampled_from(["token_weights", "lexical_weights", "indices_values"]),
    st.sampled_from(["token_weights", "lexical_weights", "indices_values"]),
)
def test_score_in_any_format_equals_flagembedding(q, d, q_fmt, d_fmt):
    flag_q = {str(k): np.float32(v) for k, v in q.items()}
    flag_d = {str(k): np.float32(v) for k, v in d.items()}
    want = float(flag_score(flag_q, flag_d))
    # The plugin's JSON carries the float32 weights as exact float64 numbers;
    # FlagEmbedding sums in float32, so the two agree to float32 precision.
    query = format_sparse(list(q), [float(np.float32(v)) for v in q.values()], None, q_fmt)
    doc = format_sparse(list(d), [float(np.float32(v)) for v in d.values()], None, d_fmt)
    assert lexical_matching_score(query, doc) == pytest.approx(want, rel=1e-6, abs=1e-9)
    # And on FlagEmbedding's own dicts, the very same number.
    assert lexical_matching_score(flag_q, flag_d) == want
