"""The typed clients against real servers."""

from __future__ import annotations

import asyncio
import socket

import httpx
import numpy as np
import pytest

from bge_m3_sparse_plugin.client import (
    AsyncSparseEmbeddingClient,
    PoolingResult,
    SparseEmbeddingClient,
    SparseEmbeddingError,
    lexical_matching_score,
)
from bge_m3_sparse_plugin.schemas import SparseEmbeddingResponse

from .support.parity import flag_reference
from .support.requests import (
    SEED_INPUT,
    plugin_part,
    pooling,
    raw,
)
from .support.server import SERVED_MODEL_NAME
from .support.texts import PARITY_TEXTS

pytestmark = pytest.mark.engine

TEXTS = list(PARITY_TEXTS.values())


@pytest.mark.parametrize(
    "options",
    [
        {"return_tokens": True},
        {"return_dense": True, "sparse_format": "indices_values"},
        {"sparse_format": "lexical_weights", "top_k": 4, "min_weight": 0.05},
        {"return_sparse": False, "return_dense": True},
    ],
    ids=["tokens", "dense+indices_values", "lexical_weights+pruned", "dense only"],
)
def test_sync_client_returns_the_servers_answer_as_models(server, options):
    with SparseEmbeddingClient(server.url, model=SERVED_MODEL_NAME) as client:
        got = client.embed(TEXTS, **options)
    assert isinstance(got, PoolingResult)
    assert plugin_part(got) == raw(server, {"input": TEXTS, **options})
    assert got.request_id.startswith("pooling-") and got.created_at > 1.7e9


def test_client_without_a_model_name_and_with_a_trailing_slash(server):
    with SparseEmbeddingClient(server.url + "/") as client:
        got = client.embed(SEED_INPUT, return_tokens=True)
    assert plugin_part(got) == raw(server, {"input": SEED_INPUT, "return_tokens": True})
    assert [e["token"] for e in got.data[0].sparse_embedding] == [
        e["token"]
        for e in raw(server, {"input": "I love China", "return_tokens": True})
        .data[0]
        .sparse_embedding
    ]


def test_async_client_concurrent_requests_each_get_their_own_answer(server):
    requests = [
        (TEXTS[i % len(TEXTS)], {"top_k": 1 + i % 4, "sparse_format": fmt})
        for i, fmt in enumerate(["token_weights", "lexical_weights", "indices_values"] * 4)
    ]

    async def run():
        async with AsyncSparseEmbeddingClient(server.url, model=SERVED_MODEL_NAME) as client:
            return await asyncio.gather(*(client.embed(text, **opts) for text, opts in requests))

    answers = asyncio.run(run())
    for (text, opts), got in zip(requests, answers):
        assert plugin_part(got) == raw(server, {"input": text, **opts})


def test_server_refusal_raises_with_the_servers_message(server):
    with (
        SparseEmbeddingClient(server.url, model=SERVED_MODEL_NAME) as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.embed([0, 10**6, 2])  # valid ids for the schema, outside the vocabulary
    err = info.value
    assert err.status_code == 400
    assert err.param == "data.input"
    assert "holds token id 1000000, outside the vocabulary" in err.message
    assert str(err).startswith("HTTP 400: ")


def test_async_server_refusal_raises_too(server):
    async def run():
        async with AsyncSparseEmbeddingClient(server.url, model="no-such-model") as client:
            await client.embed("x")

    with pytest.raises(SparseEmbeddingError) as info:
        asyncio.run(run())
    assert info.value.status_code == 404
    assert "no-such-model" in info.value.message


def test_bad_options_are_refused_before_sending():
    # Nothing listens there: the request must not be sent at all.
    with (
        SparseEmbeddingClient("http://127.0.0.1:9", timeout=1) as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.embed("x", top_k=0)
    assert info.value.status_code is None
    assert info.value.param == "data.top_k"
    with (
        SparseEmbeddingClient("http://127.0.0.1:9", timeout=1) as client,
        pytest.raises(SparseEmbeddingError, match=r"data\.top: Extra inputs are not permitted"),
    ):
        client.embed("x", top=3)


def test_timeout_is_honoured():
    # A listener that never answers: the read times out, under the
    # configured limit rather than the default 60 s.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with (
            SparseEmbeddingClient(url, timeout=0.5) as client,
            pytest.raises(httpx.ReadTimeout) as info,
        ):
            client.embed("x")
    assert info.value.request.extensions["timeout"]["read"] == 0.5


def test_base_url_is_honoured(server):
    with (
        SparseEmbeddingClient("http://127.0.0.1:9", timeout=5) as client,
        pytest.raises(httpx.ConnectError),
    ):
        client.embed("x")
    with SparseEmbeddingClient(server.url, timeout=60) as client:
        assert plugin_part(client.embed("x")) == raw(server, {"input": "x"})


def test_colbert_through_the_client(server, tokenizer):
    with SparseEmbeddingClient(server.url) as client:
        got = client.embed(SEED_INPUT, return_colbert_vecs=True, return_sparse=False)
    assert plugin_part(got) == raw(
        server, {"input": SEED_INPUT, "return_colbert_vecs": True, "return_sparse": False}
    )
    # One vector per token but <s>.
    assert [len(item.colbert_vecs) for item in got.data] == [
        len(tokenizer(text)["input_ids"]) - 1 for text in SEED_INPUT
    ]
    assert got.data and all(
        np.allclose(np.linalg.norm(np.asarray(item.colbert_vecs), axis=1), 1.0, atol=1e-5)
        for item in got.data
    )


@pytest.mark.parametrize("fmt", ["token_weights", "lexical_weights", "indices_values"])
def test_lexical_matching_score_on_client_results_equals_flagembeddings(server, flag_model, fmt):
    queries, docs = TEXTS[:4], TEXTS[2:]
    with SparseEmbeddingClient(server.url) as client:
        q = client.embed(queries, sparse_format=fmt).data
        d = client.embed(docs, sparse_format=fmt).data
    fq = flag_reference(flag_model, queries)["lexical_weights"]
    fd = flag_reference(flag_model, docs)["lexical_weights"]
    want = np.array(flag_model.compute_lexical_matching_score(fq, fd), dtype=np.float64)
    got = np.array([[lexical_matching_score(a, b) for b in d] for a in q])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert (want > 0).sum() >= 4  # the texts share tokens: the scores are not all zero


def test_truncate_prompt_tokens_and_request_id_reach_the_server(server):
    long_text = " ".join(["search"] * 400)
    sent = []
    with (
        httpx.Client(event_hooks={"request": [sent.append]}, timeout=60) as http,
        SparseEmbeddingClient(server.url, http_client=http) as client,
    ):
        got = client.embed(long_text, truncate_prompt_tokens=50, request_id="client-test-1")
    assert sent[0].headers["X-Request-Id"] == "client-test-1"
    assert got.request_id == "pooling-client-test-1"  # vLLM's id: its prefix and the id sent
    assert got.usage.prompt_tokens == 50
    want = SparseEmbeddingResponse.model_validate(
        pooling(server, {"input": long_text}, truncate_prompt_tokens=50)["data"]
    )
    assert plugin_part(got) == want


def test_the_clients_connections_expire_before_vllm_closes_them():
    """A request sent on a connection as vLLM's server closes it for being idle
    is reset (benchmarks/keepalive_race.py): the client must drop its idle
    connections before vLLM's keep-alive timeout does."""
    from vllm import envs

    from bge_m3_sparse_plugin.client import KEEPALIVE_EXPIRY_S

    assert KEEPALIVE_EXPIRY_S < envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE
