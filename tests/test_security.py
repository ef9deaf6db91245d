"""--api-key guards every route that runs the model, /pooling and /invocations
included: real servers started with a key (flag, and VLLM_API_KEY), one with
two API-server processes, one of the 'embed' task (with /score and /rerank),
and one without a key."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from bge_m3_sparse_plugin.client import (
    AsyncSparseEmbeddingClient,
    SparseEmbeddingClient,
    SparseEmbeddingError,
)
from bge_m3_sparse_plugin.schemas import SparseEmbeddingResponse

from .support.requests import (
    SEED_INPUT,
    assert_same_answer,
    check_concurrent_mixed_requests,
    pending_requests,
)
from .support.server import API_KEY, SERVED_MODEL_NAME

pytestmark = pytest.mark.engine

REQUEST = {"model": SERVED_MODEL_NAME, "data": {"input": SEED_INPUT, "return_tokens": True}}
REFUSED = {
    "no Authorization header": {},
    "a wrong key": {"Authorization": "Bearer wrong"},
    "the key without Bearer": {"Authorization": API_KEY},
    "Bearer and no key": {"Authorization": "Bearer"},
    "another scheme": {"Authorization": f"Basic {API_KEY}"},
}
RIGHT = {"Authorization": f"Bearer {API_KEY}"}
# Each on a new connection, so that both API-server processes of the
# two-process server take some of them.
TRIES = 12


def plain(answer: SparseEmbeddingResponse | dict) -> dict:
    """A response as the client's model dumps it, from the model or from JSON."""
    if isinstance(answer, dict):
        answer = SparseEmbeddingResponse.model_validate(answer)
    return answer.model_dump(mode="json", include={"data", "usage"})


def post(server, headers: dict[str, str], body: dict = REQUEST) -> httpx.Response:
    return httpx.post(server.url + "/pooling", json=body, headers=headers, timeout=120)


@pytest.fixture(scope="module")
def unguarded_answer(server):
    resp = post(server, {})
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


@pytest.fixture(params=["keyed_server", "env_keyed_server"])
def guarded(request):
    """Each server with a key: --api-key (two API servers), and VLLM_API_KEY."""
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("form", list(REFUSED))
def test_pooling_refuses_a_request_without_the_right_key(guarded, form):
    answers = [post(guarded, REFUSED[form]) for _ in range(TRIES)]
    assert [(r.status_code, r.json()) for r in answers] == [
        (401, {"error": "Unauthorized"})
    ] * TRIES


def test_the_right_key_gets_the_normal_answer(guarded, unguarded_answer):
    answers = [post(guarded, RIGHT) for _ in range(TRIES)]
    assert [r.status_code for r in answers] == [200] * TRIES, answers[0].text
    for resp in answers:
        assert_same_answer(resp.json()["data"], unguarded_answer)


def test_health_and_metrics_stay_as_vllm_makes_them(guarded):
    # vLLM leaves /health and /metrics open, and guards /v1.
    assert httpx.get(guarded.url + "/health", timeout=30).status_code == 200
    metrics = httpx.get(guarded.url + "/metrics", timeout=30)
    assert metrics.status_code == 200 and "vllm:" in metrics.text
    assert httpx.get(guarded.url + "/v1/models", timeout=30).status_code == 401
    assert httpx.get(guarded.url + "/v1/models", headers=RIGHT, timeout=30).status_code == 200


# vLLM's routes that run no model, which it leaves open (issue 19's list).
OPEN = {"/health", "/ping", "/metrics", "/version", "/load", "/tokenize", "/detokenize"}


def routes(server) -> list[tuple[str, str]]:
    """Every (method, path) that the server's /openapi.json lists."""
    paths = httpx.get(server.url + "/openapi.json", timeout=30).json()["paths"]
    return [(method.upper(), path) for path, methods in paths.items() for method in methods]


@pytest.mark.parametrize("config", ["keyed_server", "env_keyed_server", "embed_server"])
def test_every_route_but_the_open_ones_needs_the_key(request, config):
    srv = request.getfixturevalue(config)
    listed = routes(srv)
    model_routes = {"/pooling", "/invocations", "/v1/embeddings"}
    if config == "embed_server":
        model_routes |= {"/score", "/rerank", "/v1/score", "/v1/rerank", "/v2/rerank"}
    assert model_routes <= {path for _, path in listed}

    def refused(method: str, path: str, headers: dict[str, str]) -> bool:
        resp = httpx.request(method, srv.url + path, json={}, headers=headers, timeout=60)
        return resp.status_code == 401

    got = {
        (method, path): (
            refused(method, path, {}),
            refused(method, path, {"Authorization": "Bearer wrong"}),
            refused(method, path, RIGHT),
        )
        for method, path in listed
    }
    want = {(method, path): (path not in OPEN, path not in OPEN, False) for method, path in listed}
    assert got == want


def test_each_api_server_process_guards_the_model_routes(keyed_server):
    log = keyed_server.log_text()
    says = r"now guards every route that runs the model"
    guarded_by = set(re.findall(r"\((ApiServer_\d+) pid=\d+\).*" + says, log))
    assert guarded_by == {"ApiServer_0", "ApiServer_1"}


def test_a_server_without_a_key_changes_nothing(server, unguarded_answer):
    for headers in REFUSED.values():
        resp = post(server, headers)
        assert resp.status_code == 200, resp.text
        assert resp.json()["data"] == unguarded_answer


def test_concurrent_mixed_requests_through_two_api_servers(keyed_server):
    check_concurrent_mixed_requests(keyed_server, headers=RIGHT)
    # Both processes' gauges, summed by vLLM's multiprocess /metrics: nothing left behind.
    assert pending_requests(keyed_server) == 0


# -- the client ---------------------------------------------------------------


def test_client_sends_the_api_key(keyed_server, unguarded_answer):
    with SparseEmbeddingClient(keyed_server.url, api_key=API_KEY) as client:
        got = client.embed(SEED_INPUT, return_tokens=True)
    assert_same_answer(plain(got), plain(unguarded_answer))


@pytest.mark.parametrize(
    "api_key,says",
    [
        (None, "the server wants an API key and none was sent"),
        ("wrong", "refused the API key: it is wrong"),
    ],
    ids=["missing", "wrong"],
)
def test_client_401_says_the_key_was_missing_or_wrong(keyed_server, api_key, says):
    with (
        SparseEmbeddingClient(keyed_server.url, api_key=api_key) as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.embed("x")
    assert info.value.status_code == 401
    assert says in info.value.message and "--api-key or VLLM_API_KEY" in info.value.message
    assert info.value.body == {"error": "Unauthorized"}


def test_client_on_ones_own_http_client(keyed_server, unguarded_answer):
    limits = httpx.Limits(max_connections=2)
    with httpx.Client(limits=limits, timeout=httpx.Timeout(90.0)) as http:
        client = SparseEmbeddingClient(keyed_server.url, api_key=API_KEY, http_client=http)
        with client:
            got = client.embed(SEED_INPUT, return_tokens=True)
        assert_same_answer(plain(got), plain(unguarded_answer))
        # The caller's client stays open after the plugin's client is closed.
        again = SparseEmbeddingClient(keyed_server.url, api_key=API_KEY, http_client=http)
        assert_same_answer(
            plain(again.embed(SEED_INPUT, return_tokens=True)), plain(unguarded_answer)
        )


def test_async_client_on_ones_own_http_client(keyed_server, unguarded_answer):
    async def run():
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=4), timeout=90) as http:
            async with AsyncSparseEmbeddingClient(
                keyed_server.url, api_key=API_KEY, http_client=http
            ) as client:
                answers = await asyncio.gather(
                    *(client.embed(SEED_INPUT, return_tokens=True) for _ in range(8))
                )
            assert not http.is_closed
            async with AsyncSparseEmbeddingClient(keyed_server.url, http_client=http) as keyless:
                with pytest.raises(SparseEmbeddingError) as info:
                    await keyless.embed("x")
            return answers, info.value

    answers, refusal = asyncio.run(run())
    assert len(answers) == 8
    for got in answers:
        assert_same_answer(plain(got), plain(unguarded_answer))
    assert refusal.status_code == 401


def test_http_client_of_the_wrong_kind_is_refused():
    with pytest.raises(TypeError, match=r"http_client must be an httpx\.Client, got AsyncClient"):
        SparseEmbeddingClient(http_client=httpx.AsyncClient())  # type: ignore[arg-type]


# -- the rerankers' key: sent, and never shown or saved -------------------------


@pytest.mark.parametrize(
    "make",
    [
        "bge_m3_sparse_plugin.integrations.langchain:BgeM3Reranker",
        "bge_m3_sparse_plugin.integrations.llamaindex:BgeM3Rerank",
    ],
)
def test_a_rerankers_key_is_sent_and_never_shown_or_saved(keyed_server, make, monkeypatch):
    import importlib

    from bge_m3_sparse_plugin._config import VLLM_API_KEY_ENV

    monkeypatch.delenv(VLLM_API_KEY_ENV, raising=False)
    module, name = make.split(":")
    cls = getattr(importlib.import_module(module), name)
    reranker = cls(base_url=keyed_server.url, api_key=API_KEY, mode="sparse")
    scores = reranker._scores("a query", ["a text", "another text"])
    assert len(scores) == 2  # the server took the key
    shown = [repr(reranker), str(reranker), str(reranker.model_dump()), reranker.model_dump_json()]
    if hasattr(reranker, "to_json"):  # what LlamaIndex writes when a component is saved
        shown += [reranker.to_json(), str(reranker.to_dict())]
    assert [text for text in shown if API_KEY in text] == []
    saved = reranker.model_dump()
    assert "api_key" not in saved
    # A copy loaded from what was saved has no key, until $VLLM_API_KEY gives it.
    with pytest.raises(SparseEmbeddingError) as refused:
        cls(**saved)._scores("a query", ["a text"])
    assert refused.value.status_code == 401
    monkeypatch.setenv(VLLM_API_KEY_ENV, API_KEY)
    assert len(cls(**saved)._scores("a query", ["a text"])) == 1
