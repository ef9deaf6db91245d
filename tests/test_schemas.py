"""Request validation and response shape, without an engine."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bge_m3_sparse_plugin.schemas import (
    ScoreRequest,
    SparseEmbeddingItem,
    SparseEmbeddingRequest,
    SparseToken,
    describe_validation_error,
)


@pytest.mark.parametrize(
    "data,inputs",
    [
        ({"input": "a"}, ["a"]),
        ({"input": ""}, [""]),
        ({"input": ["a", "b"]}, ["a", "b"]),
        ({"input": [0, 5, 2]}, [[0, 5, 2]]),
        ({"input": [[0, 5, 2], [0, 2]]}, [[0, 5, 2], [0, 2]]),
    ],
)
def test_accepted_input_shapes(data, inputs):
    assert SparseEmbeddingRequest.model_validate(data).inputs() == inputs


def test_defaults_follow_flagembedding():
    req = SparseEmbeddingRequest.model_validate({"input": "a"})
    assert (req.return_sparse, req.return_dense, req.return_colbert_vecs, req.return_tokens) == (
        True,
        False,
        False,
        False,
    )
    assert (req.sparse_format, req.top_k, req.min_weight) == ("token_weights", None, None)


def test_pruning_options_accepted():
    req = SparseEmbeddingRequest.model_validate({"input": "a", "top_k": 3, "min_weight": 0})
    assert (req.top_k, req.min_weight) == (3, 0.0)


SHAPES = (
    "data.input must be a string, a non-empty list of strings, a non-empty list of token "
    "ids, or a non-empty list of non-empty lists of token ids, got "
)


@pytest.mark.parametrize(
    "data,message,field",
    [
        ({"input": 5}, SHAPES + "5", "data.input"),
        ({"input": []}, SHAPES + "[]", "data.input"),
        ({"input": [True]}, SHAPES + "[True]", "data.input"),
        (
            {"input": ["a", None]},
            "data.input[1] must be a string like data.input[0], got None",
            "data.input",
        ),
        (
            {"input": [[1], []]},
            "data.input[1] must be a non-empty list of token ids, got []",
            "data.input",
        ),
        (
            {"input": [[1], [2, -1]]},
            "data.input[1][1] must be a token id (an integer >= 0), got -1",
            "data.input",
        ),
        (
            {"input": [1, "a"]},
            "data.input[1] must be a token id (an integer >= 0), got 'a'",
            "data.input",
        ),
        ({}, "data.input: field required", "data.input"),
        ({"input": "a", "top": 1}, "data.top: Extra inputs are not permitted, got 1", "data.top"),
        (
            {"input": "a", "return_tokens": 1},
            "data.return_tokens: Input should be a valid boolean, got 1",
            "data.return_tokens",
        ),
        (
            {"input": "a", "sparse_format": "csr"},
            "data.sparse_format: Input should be 'token_weights', 'lexical_weights' or 'indices_values', got 'csr'",
            "data.sparse_format",
        ),
        (
            {"input": "a", "top_k": 0},
            "data.top_k: Input should be greater than or equal to 1, got 0",
            "data.top_k",
        ),
        (
            {"input": "a", "top_k": 2.5},
            "data.top_k: Input should be a valid integer, got 2.5",
            "data.top_k",
        ),
        (
            {"input": "a", "top_k": "3"},
            "data.top_k: Input should be a valid integer, got '3'",
            "data.top_k",
        ),
        (
            {"input": "a", "min_weight": -0.5},
            "data.min_weight: Input should be greater than or equal to 0, got -0.5",
            "data.min_weight",
        ),
        (
            {"input": "a", "min_weight": float("inf")},
            "data.min_weight: Input should be a finite number, got inf",
            "data.min_weight",
        ),
        (
            {"input": "a", "min_weight": "0.1"},
            "data.min_weight: Input should be a valid number, got '0.1'",
            "data.min_weight",
        ),
        (
            {"input": "a", "return_colbert_vecs": "yes"},
            "data.return_colbert_vecs: Input should be a valid boolean, got 'yes'",
            "data.return_colbert_vecs",
        ),
        (
            {"input": "a", "return_tokens": True, "sparse_format": "lexical_weights"},
            "data.return_tokens is true, but only sparse_format 'token_weights' has token strings; "
            "data.sparse_format is 'lexical_weights'",
            "data.return_tokens",
        ),
    ],
)
def test_errors_name_the_field(data, message, field):
    with pytest.raises(ValidationError) as info:
        SparseEmbeddingRequest.model_validate(data)
    got_message, got_field = describe_validation_error(info.value)
    assert got_message == "invalid request data: " + message
    assert got_field == field


def test_item_leaves_out_what_was_not_asked_for():
    sparse_only = SparseEmbeddingItem(
        index=0, sparse_embedding=[SparseToken(token_id=5, weight=0.5, token=None)]
    )
    assert sparse_only.model_dump() == {
        "index": 0,
        "object": "sparse-embedding",
        "sparse_embedding": [{"token_id": 5, "weight": 0.5, "token": None}],
    }
    dense_only = SparseEmbeddingItem(index=1, dense_embedding=[0.6, 0.8])
    assert dense_only.model_dump() == {
        "index": 1,
        "object": "sparse-embedding",
        "dense_embedding": [0.6, 0.8],
    }
    assert SparseEmbeddingItem(index=2, sparse_embedding=[]).model_dump()["sparse_embedding"] == []


@pytest.mark.parametrize(
    "sparse",
    [
        [{"token_id": 5, "weight": 0.5, "token": "x"}],
        {"indices": [5, 9], "values": [0.5, 0.25]},
        {"5": 0.5, "9": 0.25},
        {},
        [],
    ],
    ids=["token_weights", "indices_values", "lexical_weights", "empty dict", "empty list"],
)
def test_each_sparse_format_round_trips_through_the_item_model(sparse):
    item = {
        "index": 0,
        "object": "sparse-embedding",
        "sparse_embedding": sparse,
        "colbert_vecs": [[1.0, 0.0]],
    }
    assert SparseEmbeddingItem.model_validate(item).model_dump() == item


LONE = json.loads('"\\ud800"')  # what JSON's escape gives: a str no UTF-8 can carry


@pytest.mark.parametrize(
    "model,data,field,says",
    [
        (SparseEmbeddingRequest, {"input": "ab" + LONE}, "data.input", "data.input holds"),
        (SparseEmbeddingRequest, {"input": ["ok", LONE]}, "data.input", "data.input[1] holds"),
        (ScoreRequest, {"query": LONE, "documents": ["d"]}, "data.query", "data.query: holds"),
        (
            ScoreRequest,
            {"query": "q", "documents": ["d", "x" + LONE]},
            "data.documents[1]",
            "data.documents[1]: holds",
        ),
        (ScoreRequest, {"pairs": [["q", LONE]]}, "data.pairs[0][1]", "data.pairs[0][1]: holds"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where(model, data, field, says):
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    message, named = describe_validation_error(info.value)
    assert named == field
    assert says in message and "lone surrogate (U+D800)" in message


@given(st.text())
def test_any_text_is_taken_exactly_when_utf8_carries_it(text):
    try:
        text.encode("utf-8")
        carried = True
    except UnicodeEncodeError:
        carried = False
    for model, data in (
        (SparseEmbeddingRequest, {"input": [text]}),
        (ScoreRequest, {"query": text, "documents": [text]}),
    ):
        try:
            model.model_validate(data)
            taken = True
        except ValidationError as exc:
            assert "lone surrogate" in describe_validation_error(exc)[0]
            taken = False
        assert taken == carried, (model.__name__, repr(text))


@given(
    rows=st.integers(0, 5),
    hidden=st.integers(1, 8),
    encoding=st.sampled_from(["float", "base64"]),
    data=st.data(),
)
def test_colbert_array_is_two_dimensional_for_every_shape_the_empty_one_included(
    rows, hidden, encoding, data
):
    """An input of the start token alone has no ColBERT vector: colbert_vecs
    is [] and colbert_array() a (0, n) float32 array, as np.zeros((0, n)) is."""
    import base64

    import numpy as np

    from bge_m3_sparse_plugin.schemas import SparseEmbeddingItem

    values = data.draw(
        st.lists(
            st.lists(st.floats(-1, 1, width=32), min_size=hidden, max_size=hidden),
            min_size=rows,
            max_size=rows,
        )
    )
    want = np.asarray(values, dtype=np.float32).reshape(rows, hidden)
    wire = (
        values
        if encoding == "float"
        else [base64.b64encode(row.astype("<f4").tobytes()).decode() for row in want]
    )
    got = SparseEmbeddingItem(index=0, colbert_vecs=wire).colbert_array()
    assert got is not None and got.dtype == np.float32 and got.ndim == 2
    assert got.shape == (want.shape if rows else (0, got.shape[1]))
    np.testing.assert_array_equal(got, want if rows else got)
