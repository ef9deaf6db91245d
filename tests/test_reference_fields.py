"""Requests written for vLLM's reference plugin (tests/plugins/bge_m3_sparse_plugin
in vLLM; embed_task from PR #37632) run here: embed_task, dimensions,
use_activation and add_special_tokens in data have that plugin's meaning,
the answers are FlagEmbedding's, and a value that cannot be honoured is a
400 naming its field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bge_m3_sparse_plugin.schemas import SparseEmbeddingRequest, describe_validation_error

from .support.parity import assert_dense_equal, assert_sparse_equal
from .support.requests import body, pooling, post

TEXTS = ["What is BGE M3?", "BM25 is a bag-of-words retrieval function", "I love China"]
HIDDEN = 128  # the small model's hidden size (tests/test_tiny_model.py holds it)


def test_the_reference_plugins_request_is_answered_as_flagembedding(server, flag_model):
    answer = pooling(server, {"input": TEXTS, "embed_task": "dense&sparse", "return_tokens": True})
    want = flag_model.encode(TEXTS, return_dense=True, return_sparse=True)
    items = answer["data"]["data"]
    assert [item["index"] for item in items] == list(range(len(TEXTS)))
    for i, item in enumerate(items):
        assert_sparse_equal(item["sparse_embedding"], want["lexical_weights"][i], f"text {i}")
        assert all(isinstance(entry["token"], str) for entry in item["sparse_embedding"])
        assert_dense_equal(item["dense_embedding"], want["dense_vecs"][i], f"text {i}")


@pytest.mark.parametrize(
    ("task", "keys"),
    [
        ("dense", {"dense_embedding"}),
        ("sparse", {"sparse_embedding"}),
        ("dense&sparse", {"dense_embedding", "sparse_embedding"}),
    ],
)
def test_embed_task_returns_what_it_names(server, task, keys):
    extra = {"dimensions": HIDDEN, "use_activation": True, "add_special_tokens": True}
    (item,) = pooling(server, {"input": ["I love China"], "embed_task": task, **extra})["data"][
        "data"
    ]
    assert set(item) - {"index", "object"} == keys


@pytest.mark.parametrize(
    ("data", "param", "says"),
    [
        ({"embed_task": "colbert"}, "data.embed_task", "'dense', 'sparse' or 'dense&sparse'"),
        ({"embed_task": "dense", "return_sparse": True}, "data.embed_task", "give one of the two"),
        ({"dimensions": 64}, "data.dimensions", "bge-m3 has no Matryoshka dimensions"),
        ({"dimensions": HIDDEN - 1}, "data.dimensions", f"leave it out, or give {HIDDEN}"),
        ({"dimensions": HIDDEN + 1}, "data.dimensions", f"leave it out, or give {HIDDEN}"),
        ({"dimensions": 0}, "data.dimensions", "greater than or equal to 1"),
        ({"use_activation": False}, "data.use_activation", "no raw ones"),
        ({"add_special_tokens": False}, "data.add_special_tokens", "between <s> and </s>"),
    ],
)
def test_a_reference_field_that_cannot_be_honoured_is_a_400_naming_it(server, data, param, says):
    resp = post(server, body({"input": ["I love China"], **data}))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param, error
    assert says in error["message"], error


def test_offline_llm_encode_takes_the_reference_fields(llm, flag_model):
    (out,) = llm.encode(
        {"data": {"input": TEXTS, "embed_task": "dense", "dimensions": HIDDEN}},
        pooling_task="plugin",
    )
    want = flag_model.encode(TEXTS)["dense_vecs"]
    for i, item in enumerate(out.outputs.data):
        assert item.sparse_embedding is None
        assert_dense_equal(item.dense_embedding, want[i], f"text {i}")


FLAG = st.none() | st.booleans()


@given(task=st.sampled_from(["dense", "sparse", "dense&sparse"]), dense=FLAG, sparse=FLAG)
def test_embed_task_and_the_flags_agree_or_embed_task_is_named(task, dense, sparse):
    data = {"input": "x", "embed_task": task}
    if dense is not None:
        data["return_dense"] = dense
    if sparse is not None:
        data["return_sparse"] = sparse
    means = {"return_dense": "dense" in task.split("&"), "return_sparse": task.endswith("sparse")}
    conflict = any(data.get(name, value) != value for name, value in means.items())
    try:
        request = SparseEmbeddingRequest.model_validate(data)
    except ValidationError as exc:
        assert conflict
        assert describe_validation_error(exc)[1] == "data.embed_task"
    else:
        assert not conflict
        assert (request.return_dense, request.return_sparse) == tuple(means.values())
