"""Request validation and response shape, without an engine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bge_m3_sparse_plugin.schemas import (
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
    assert (req.return_sparse, req.return_dense, req.return_tokens) == (True, False, False)


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
        ({"input": ["a", None]}, "data.input[1] must be a string like data.input[0], got None", "data.input"),
        ({"input": [[1], []]}, "data.input[1] must be a non-empty list of token ids, got []", "data.input"),
        ({"input": [[1], [2, -1]]}, "data.input[1][1] must be a token id (an integer >= 0), got -1", "data.input"),
        ({"input": [1, "a"]}, "data.input[1] must be a token id (an integer >= 0), got 'a'", "data.input"),
        ({}, "data.input: field required", "data.input"),
        ({"input": "a", "top": 1}, "data.top: Extra inputs are not permitted, got 1", "data.top"),
        ({"input": "a", "return_tokens": 1}, "data.return_tokens: Input should be a valid boolean, got 1", "data.return_tokens"),
    ],
)
def test_errors_name_the_field(data, message, field):
    with pytest.raises(ValidationError) as info:
        SparseEmbeddingRequest.model_validate(data)
    got_message, got_field = describe_validation_error(info.value)
    assert got_message == "invalid request data: " + message
    assert got_field == field


def test_item_leaves_out_what_was_not_asked_for():
    sparse_only = SparseEmbeddingItem(index=0, sparse_embedding=[SparseToken(token_id=5, weight=0.5, token=None)])
    assert sparse_only.model_dump() == {
        "index": 0,
        "object": "sparse-embedding",
        "sparse_embedding": [{"token_id": 5, "weight": 0.5, "token": None}],
    }
    dense_only = SparseEmbeddingItem(index=1, dense_embedding=[0.6, 0.8])
    assert dense_only.model_dump() == {"index": 1, "object": "sparse-embedding", "dense_embedding": [0.6, 0.8]}
    assert SparseEmbeddingItem(index=2, sparse_embedding=[]).model_dump()["sparse_embedding"] == []
