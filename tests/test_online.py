"""The online /pooling path, on a real vLLM server process with the plugin."""

from __future__ import annotations

import httpx
import pytest

from .support.parity import assert_dense_equal, assert_sparse_equal, flag_reference
from .support.requests import (
    SEED_INPUT,
    pooling,
    post,
)
from .support.server import SERVED_MODEL_NAME
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def seed_response(server):
    return pooling(server, {"input": SEED_INPUT, "return_tokens": True}, task="token_classify")


def test_seed_request_full_shape(seed_response, flag_model, tokenizer):
    """The seed's curl request, as users send it, with "task": "token_classify"."""
    body = seed_response
    assert set(body) == {"request_id", "created_at", "data"}
    assert body["request_id"].startswith("pooling-")
    assert isinstance(body["created_at"], int)
    flag = flag_reference(flag_model, SEED_INPUT)
    expected_items = [
        {
            "index": i,
            "object": "sparse-embedding",
            "sparse_embedding": [
                {
                    "token_id": int(k),
                    "weight": pytest.approx(float(v), rel=1e-5, abs=1e-6),
                    "token": tokenizer.decode([int(k)]),
                }
                for k, v in flag["lexical_weights"][i].items()
            ],
        }
        for i in range(len(SEED_INPUT))
    ]
    prompt_tokens = sum(len(tokenizer(t)["input_ids"]) for t in SEED_INPUT)
    assert body["data"] == {
        "data": expected_items,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
        },
    }
    assert prompt_tokens == 14  # as in the seed's response for the same two texts
    assert any(body["data"]["data"][i]["sparse_embedding"] for i in range(2))


@pytest.mark.parametrize("task", ["plugin", None])
def test_plugin_task_and_no_task_answer_the_same(server, seed_response, task):
    extra = {} if task is None else {"task": task}
    body = pooling(server, {"input": SEED_INPUT, "return_tokens": True}, **extra)
    assert body["data"] == seed_response["data"]


def test_online_parity_with_dense(server, flag_model):
    texts = [*PARITY_TEXTS.values(), LONG_TEXT]
    body = pooling(server, {"input": texts, "return_dense": True})
    flag = flag_reference(flag_model, texts)
    items = body["data"]["data"]
    assert [it["index"] for it in items] == list(range(len(texts)))
    names = [*PARITY_TEXTS, "long"]
    for i, item in enumerate(items):
        assert set(item) == {"index", "object", "sparse_embedding", "dense_embedding"}
        empty = names[i] in EMPTY_BY_DESIGN
        assert (item["sparse_embedding"] or empty) and all(
            e["token"] is None for e in item["sparse_embedding"]
        )
        assert_sparse_equal(
            item["sparse_embedding"], flag["lexical_weights"][i], names[i], may_be_empty=empty
        )
        assert_dense_equal(item["dense_embedding"], flag["dense_vecs"][i], f"item {i}")


def test_pre_tokenized_input(server, tokenizer, seed_response):
    ids = [tokenizer(t)["input_ids"] for t in SEED_INPUT]
    body = pooling(server, {"input": ids, "return_tokens": True})
    assert body["data"] == seed_response["data"]


BAD_DATA = [
    # (label, data, what the message must say, the error's param: the field, an
    # element of data.input being named in the message)
    ("input is a number", {"input": 5}, "data.input", "data.input"),
    ("input is null", {"input": None}, "data.input", "data.input"),
    ("input is missing", {"return_tokens": True}, "data.input", "data.input"),
    ("empty list", {"input": []}, "data.input", "data.input"),
    ("nested empty list", {"input": [[]]}, "data.input[0]", "data.input"),
    ("mixed list", {"input": ["a", 1]}, "data.input[1]", "data.input"),
    ("negative token id", {"input": [0, -5, 2]}, "data.input[1]", "data.input"),
    ("float token id", {"input": [[0, 1.5, 2]]}, "data.input[0][1]", "data.input"),
    ("token id outside vocabulary", {"input": [0, 10**6, 2]}, "data.input", "data.input"),
    (
        "return_tokens not a bool",
        {"input": "x", "return_tokens": "yes"},
        "data.return_tokens",
        "data.return_tokens",
    ),
    (
        "return_dense null",
        {"input": "x", "return_dense": None},
        "data.return_dense",
        "data.return_dense",
    ),
    (
        "unknown field",
        {"input": "x", "return_colbert": True},
        "data.return_colbert",
        "data.return_colbert",
    ),
    (
        "nothing asked for",
        {"input": "x", "return_sparse": False},
        "data.return_sparse",
        "data.return_sparse",
    ),
    # Over vLLM's max_model_len (1024 here): vLLM's own check refuses it.
    (
        "text over max_model_len",
        {"input": ["ok", "x " * 1100]},
        "maximum context length is 1024",
        "input_tokens",
    ),
    # Over the 1024 positions the model has: its config says position_embedding_type
    # absolute (as bge-m3's), so vLLM's max_model_len is the tokenizer's 1024, exact.
    (
        "ids over the model's positions",
        {"input": [0] + [5] * 1024 + [2]},
        "maximum context length is 1024 tokens. However, your prompt contains 1026 input tokens",
        "input_tokens",
    ),
    (
        "texts over the model's positions",
        {"input": ["ok", "x " * 1023]},
        "maximum context length is 1024 tokens. However, your prompt contains at least 1025",
        "input_tokens",
    ),
    # The plugin's cap on characters per request (BGE_M3_SPARSE_MAX_CHARS, 8,000,000 by default).
    (
        "too many characters",
        {"input": ["x" * 4_000_001, "y" * 3_999_999, "z"]},
        "data.input holds 8000001 characters of text; at most 8000000 are allowed per request "
        "(split the request, or set BGE_M3_SPARSE_MAX_CHARS",
        "data.input",
    ),
]


@pytest.mark.parametrize("label,data,says,param", BAD_DATA, ids=[b[0] for b in BAD_DATA])
def test_bad_data_is_a_400_naming_the_field(server, label, data, says, param):
    resp = post(server, {"model": SERVED_MODEL_NAME, "data": data})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["param"], error["code"]) == (param, 400)
    assert says in error["message"]


@pytest.mark.parametrize(
    "body,says",
    [
        (
            {"model": SERVED_MODEL_NAME, "data": None},
            "data must be an object with an 'input' field (or, to score, 'query' and "
            "'documents', or 'pairs'), got NoneType",
        ),
        (
            {"model": SERVED_MODEL_NAME, "data": "text"},
            "data must be an object with an 'input' field (or, to score, 'query' and "
            "'documents', or 'pairs'), got str",
        ),
        ({"model": SERVED_MODEL_NAME}, "'loc': 'body.data', 'msg': 'Field required'"),
    ],
    ids=["data null", "data a string", "data missing"],
)
def test_bad_data_object_is_a_400(server, body, says):
    resp = post(server, body)
    assert resp.status_code == 400, resp.text
    assert says in resp.json()["error"]["message"]


def test_not_json_is_a_400(server):
    resp = httpx.post(
        server.url + "/pooling",
        content=b"{not json",
        timeout=30,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert "JSON decode error" in error["message"], error
    assert "Expecting property name enclosed in double quotes" in error["message"], error
    assert error["code"] == 400


def test_server_still_serves_after_bad_input(server, seed_response):
    for _, data, _, _ in BAD_DATA:
        post(server, {"model": SERVED_MODEL_NAME, "data": data})
    assert server.alive()
    body = pooling(server, {"input": SEED_INPUT, "return_tokens": True})
    assert body["data"] == seed_response["data"]


def test_the_token_classify_server_answers_as_the_default_one(
    token_classify_server, server, seed_response
):
    """--pooler-config's task no longer limits what the plugin answers: each
    request runs the task that gives what it asks."""
    data = {"input": SEED_INPUT, "return_tokens": True, "return_dense": True}
    assert pooling(token_classify_server, data)["data"] == pooling(server, data)["data"]
    body = pooling(token_classify_server, {"input": SEED_INPUT, "return_tokens": True})
    assert body["data"] == seed_response["data"]
