"""Nothing mixed up or leaked between requests, under concurrency and failures.

Real servers (tests/support/server.py) and the real offline engine; the map of
requests in flight is observed through the plugin's gauge on /metrics.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from .support.parity import assert_sparse_equal
from .support.requests import (
    TEXTS,
    TOO_LONG,
    body,
    check_concurrent_mixed_requests,
    pending_requests,
    post,
)
from .support.server import SMALL_MAX_COLBERT_TOKENS, SMALL_MAX_INPUTS, SMALL_MAX_PENDING

pytestmark = pytest.mark.engine


def test_concurrent_mixed_requests_each_get_their_own_answer(server):
    check_concurrent_mixed_requests(server)


def test_a_failed_request_does_not_pass_its_options_on(server):
    """vLLM #48112: after a request fails between pre- and post-processing,
    the next requests must get their own options, not the failed one's."""
    resp = post(server, body({"input": [TOO_LONG], "return_tokens": True, "return_dense": True}))
    assert resp.status_code == 400, resp.text
    plain = post(server, body({"input": ["I love China"]})).json()["data"]["data"][0]
    assert set(plain) == {"index", "object", "sparse_embedding"}
    assert plain["sparse_embedding"] and all(e["token"] is None for e in plain["sparse_embedding"])
    tokens = post(server, body({"input": ["I love China"], "return_tokens": True})).json()
    entries = tokens["data"]["data"][0]["sparse_embedding"]
    assert [e["token_id"] for e in entries] == [e["token_id"] for e in plain["sparse_embedding"]]
    assert entries and all(e["token"] for e in entries)


def test_retry_with_the_same_request_id_after_a_failure(server):
    headers = {"X-Request-Id": "client-retry-1"}
    resp = post(server, body({"input": TOO_LONG, "return_dense": True}), headers=headers)
    assert resp.status_code == 400, resp.text
    resp = post(server, body({"input": "I love China", "return_tokens": True}), headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.json()["request_id"] == "pooling-client-retry-1"
    item = resp.json()["data"]["data"][0]
    assert set(item) == {"index", "object", "sparse_embedding"}
    assert item["sparse_embedding"] and all(e["token"] for e in item["sparse_embedding"])


def test_too_many_inputs(server):
    resp = post(server, body({"input": ["a"] * 1025}))
    assert resp.status_code == 400, resp.text
    assert "data.input has 1025 items; at most 1024" in resp.json()["error"]["message"]
    assert "BGE_M3_SPARSE_MAX_INPUTS" in resp.json()["error"]["message"]


def test_max_inputs_is_configurable(token_classify_server):
    n = SMALL_MAX_INPUTS
    ok = post(token_classify_server, body({"input": ["a"] * n}))
    assert ok.status_code == 200, ok.text
    assert len(ok.json()["data"]["data"]) == n
    resp = post(token_classify_server, body({"input": ["a"] * (n + 1)}))
    assert resp.status_code == 400, resp.text
    assert f"data.input has {n + 1} items; at most {n}" in resp.json()["error"]["message"]


def test_colbert_vectors_are_bounded_per_response(token_classify_server, model_dir):
    """FlagEmbedding gives a vector per token but the first: token-id inputs
    of n + 1 ids make n vectors. Up to the bound they come back; one more is
    a 400 naming the field and the variable, and the server goes on."""
    hidden = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    n = SMALL_MAX_COLBERT_TOKENS
    half = [0, *[5] * (n // 2 - 1), 2]  # n // 2 vectors each
    ok = post(token_classify_server, body({"input": [half, half], "return_colbert_vecs": True}))
    assert ok.status_code == 200, ok.text
    assert [len(item["colbert_vecs"]) for item in ok.json()["data"]["data"]] == [n // 2] * 2
    over = [0, *[5] * (n // 2), 2]  # one vector more
    resp = post(token_classify_server, body({"input": [half, over], "return_colbert_vecs": True}))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "data.return_colbert_vecs"
    assert f"hold {(n + 1) * hidden} values" in error["message"]
    assert f"at most {n * hidden}" in error["message"]
    assert "BGE_M3_SPARSE_MAX_COLBERT_VALUES" in error["message"]
    again = post(token_classify_server, body({"input": [half], "return_colbert_vecs": True}))
    assert again.status_code == 200, again.text


def test_pending_state_is_emptied_by_failures_and_abandoned_requests(token_classify_server):
    srv = token_classify_server
    # Each of these passes pre_process and then fails inside vLLM, so it
    # never reaches post_process: the end of its task removes its entry.
    for _ in range(3 * SMALL_MAX_PENDING):
        assert post(srv, body({"input": TOO_LONG})).status_code == 400
    assert pending_requests(srv) == 0
    # Clients that give up mid-request: connected, then no patience for the answer.
    big = body({"input": ["the " * 1000] * SMALL_MAX_INPUTS})  # 1002 tokens each
    for _ in range(SMALL_MAX_PENDING):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/pooling", json=big, timeout=httpx.Timeout(10.0, read=0.005))
    # vLLM finishes or aborts the abandoned requests; then nothing is left.
    deadline = time.monotonic() + 120
    while pending_requests(srv) != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert pending_requests(srv) == 0
    # The server still answers, with the right options.
    assert srv.alive()
    resp = post(srv, body({"input": ["I love China"], "return_tokens": True}))
    assert resp.status_code == 200, resp.text
    entries = resp.json()["data"]["data"][0]["sparse_embedding"]
    assert entries and all(e["token"] for e in entries)


def test_truncate_prompt_tokens_online(server, flag_model):
    long_text = " ".join(f"document {i} about search and retrieval;" for i in range(200))
    resp = post(server, body({"input": [long_text, "I love China"]}, truncate_prompt_tokens=600))
    assert resp.status_code == 200, resp.text
    out = resp.json()["data"]
    # vLLM truncates texts with the tokenizer, keeping </s>: FlagEmbedding's max_length.
    flag = flag_model.encode([long_text, "I love China"], return_sparse=True, max_length=600)
    for i in range(2):
        assert_sparse_equal(
            out["data"][i]["sparse_embedding"], flag["lexical_weights"][i], f"item {i}"
        )
    assert out["usage"]["prompt_tokens"] == 600 + 5


def test_truncate_prompt_tokens_beyond_the_models_positions(server):
    # vLLM's max_model_len is the model's 1024 positions (position_embedding_type absolute,
    # as bge-m3's config says): vLLM refuses the cut itself, before the model runs.
    resp = post(server, body({"input": TOO_LONG}, truncate_prompt_tokens=1026))
    assert resp.status_code == 400, resp.text
    assert (
        "truncate_prompt_tokens value is greater than max_model_len"
        in resp.json()["error"]["message"]
    )


def test_truncate_pre_tokenized_input_keeps_the_first_ids(server, tokenizer):
    ids = tokenizer(TEXTS[2])["input_ids"]
    truncated = post(server, body({"input": ids}, truncate_prompt_tokens=8)).json()["data"]
    first = post(server, body({"input": ids[:8]})).json()["data"]
    assert truncated == first


def _processor(llm):
    return llm.pooling_io_processors["plugin"].io_processor


def test_offline_failures_leave_nothing_behind(llm, flag_model):
    from vllm.exceptions import VLLMValidationError

    processor = _processor(llm)
    with pytest.raises(VLLMValidationError, match="maximum context length"):
        llm.encode(
            {"data": {"input": TOO_LONG, "return_tokens": True, "return_dense": True}},
            pooling_task="plugin",
        )
    out = llm.encode({"data": {"input": ["I love China"]}}, pooling_task="plugin")
    assert len(processor.pending) == 0  # offline, nothing goes into the online map
    # The next call has its own options, not the failed call's (tokens, dense).
    item = out[0].outputs.model_dump()["data"][0]
    assert set(item) == {"index", "object", "sparse_embedding"}
    flag = flag_model.encode(["I love China"], return_sparse=True)["lexical_weights"][0]
    assert_sparse_equal(item["sparse_embedding"], flag, "after a failed call")
    assert all(e["token"] is None for e in item["sparse_embedding"])


def test_truncate_prompt_tokens_offline(llm, flag_model):
    long_text = " ".join(f"document {i} about search and retrieval;" for i in range(200))
    out = llm.encode(
        {"data": {"input": [long_text]}},
        pooling_task="plugin",
        tokenization_kwargs={"truncate_prompt_tokens": 300},
    )[0].outputs.model_dump()
    flag = flag_model.encode([long_text], return_sparse=True, max_length=300)
    assert_sparse_equal(out["data"][0]["sparse_embedding"], flag["lexical_weights"][0], "offline")
    assert out["usage"]["prompt_tokens"] == 300
