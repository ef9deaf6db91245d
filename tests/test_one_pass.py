"""All three outputs from one forward pass, on real servers.

The session's servers load the model as the plugin's BgeM3OnePassModel
(HF_OVERRIDES): a request for ColBERT beside sparse or dense, and every score,
runs each input once. Here, beside them:

- a server that loads it as vLLM's own BgeM3EmbeddingModel, with the plugin:
  the fallback, which runs each input twice, says so once in its log, and
  answers every request as the one-pass server does;
- a server of the plugin's architecture without ``--io-processor-plugin``:
  vLLM's own /pooling answers as on vLLM's own model.

How many times each input ran is read from vLLM's own counter of finished
engine requests (``vllm:request_success_total`` on /metrics), not from the
plugin.
"""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bge_m3_sparse_plugin._config import ONE_PASS_ARCHITECTURE, VLLM_ARCHITECTURE

from .conftest import _start_server
from .support.requests import assert_same_answer, pooling
from .support.server import SERVED_MODEL_NAME
from .support.texts import LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

TEXTS = ["I love China", "hi, bge-m3", PARITY_TEXTS["multilingual"], LONG_TEXT]
FALLBACK_LINE = f"the model is loaded as {VLLM_ARCHITECTURE}, not {ONE_PASS_ARCHITECTURE}"


@pytest.fixture(scope="module")
def vllm_model_server(model_dir, tmp_path_factory):
    """The plugin on vLLM's own BgeM3EmbeddingModel: two passes."""
    overrides = json.dumps({"architectures": [VLLM_ARCHITECTURE]})
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "vllm-model-server",
        ["--hf-overrides", overrides],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def no_plugin_server(model_dir, tmp_path_factory):
    """The plugin's architecture, no IO processor: vLLM's routes alone."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "no-plugin-server",
        plugin=False,
    )
    yield srv
    srv.stop()


def engine_requests(server) -> float:
    """vLLM's count of engine requests finished on ``server``, all reasons."""
    text = httpx.get(server.url + "/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "vllm:request_success"
        for sample in family.samples
        if sample.name == "vllm:request_success_total"
    )


def answer_and_runs(server, data: dict) -> tuple[dict, float]:
    before = engine_requests(server)
    body = pooling(server, data)["data"]
    return body, engine_requests(server) - before


ALL_THREE = {"input": TEXTS, "return_dense": True, "return_colbert_vecs": True}
REQUESTS = {
    "all three": (ALL_THREE, len(TEXTS)),
    "sparse and ColBERT": ({"input": TEXTS, "return_colbert_vecs": True}, len(TEXTS)),
    "dense and ColBERT": (
        {"input": TEXTS, "return_sparse": False, "return_dense": True, "return_colbert_vecs": True},
        len(TEXTS),
    ),
    "ColBERT alone": (
        {"input": TEXTS, "return_sparse": False, "return_colbert_vecs": True},
        len(TEXTS),
    ),
    "sparse and dense": ({"input": TEXTS, "return_dense": True}, len(TEXTS)),
    # A score runs each distinct query and passage: 1 + 4 here, then 3 + 3.
    "score of documents": ({"query": TEXTS[0], "documents": TEXTS}, 5),
    "score of pairs": (
        {"pairs": [[TEXTS[0], TEXTS[1]], [TEXTS[2], TEXTS[3]], [TEXTS[1], TEXTS[2]]]},
        6,
    ),
    # Modes without ColBERT: sparse and dense alone, on both models.
    "score, sparse and dense modes": (
        {"query": TEXTS[0], "documents": TEXTS, "modes": ["sparse+dense", "dense"]},
        5,
    ),
}


@pytest.mark.parametrize("name", list(REQUESTS))
def test_each_input_runs_once_and_the_answer_is_the_two_pass_one(server, vllm_model_server, name):
    data, inputs = REQUESTS[name]
    once, runs = answer_and_runs(server, data)
    twice, fallback_runs = answer_and_runs(vllm_model_server, data)
    assert runs == inputs
    needs_two = name in ("all three", "sparse and ColBERT", "dense and ColBERT") or (
        name.startswith("score") and "modes" not in data
    )
    assert fallback_runs == inputs * (2 if needs_two else 1)
    assert_same_answer(once, twice, name)
    if "modes" in data:  # only the scores asked, each the one a full score gives
        full, _ = answer_and_runs(server, {k: v for k, v in data.items() if k != "modes"})
        want = [{k: item["scores"][k] for k in ("dense", "sparse+dense")} for item in full["data"]]
        assert [item["scores"] for item in once["data"]] == want


def test_the_fallback_says_so_once_and_the_one_pass_server_not_at_all(server, vllm_model_server):
    pooling(vllm_model_server, ALL_THREE)
    pooling(vllm_model_server, {"query": TEXTS[0], "documents": TEXTS})
    assert vllm_model_server.log_text().count(FALLBACK_LINE) == 1
    assert "serve with --hf-overrides" in vllm_model_server.log_text()
    assert FALLBACK_LINE not in server.log_text()


def answer(server, route: str, body: dict) -> tuple[int, object]:
    """A route's status and what it answered, without vLLM's ids and times."""
    resp = httpx.post(server.url + route, json={"model": SERVED_MODEL_NAME, **body}, timeout=120)
    content = resp.json()
    if resp.status_code == 200:
        return 200, [item.get("embedding", item.get("data")) for item in content["data"]]
    return resp.status_code, content["error"]["message"]


VLLM_ROUTES = {
    "/v1/embeddings": ("/v1/embeddings", {"input": TEXTS}),
    "/pooling, the server's task": ("/pooling", {"input": TEXTS}),
    "/pooling, embed&token_classify": (
        "/pooling",
        {"input": TEXTS, "task": "embed&token_classify"},
    ),
    "/pooling, token_embed": ("/pooling", {"input": TEXTS, "task": "token_embed"}),
}


@pytest.mark.parametrize("name", list(VLLM_ROUTES))
def test_vllms_own_routes_answer_as_on_vllms_own_model(no_plugin_server, vllm_model_server, name):
    """Without the plugin, the one-pass model's server answers vLLM's own
    routes (dense vectors, and vLLM's refusals) as vLLM's BgeM3EmbeddingModel
    does."""
    route, body = VLLM_ROUTES[name]
    ours, vllms = answer(no_plugin_server, route, body), answer(vllm_model_server, route, body)
    assert ours[0] == vllms[0], (ours, vllms)
    assert_same_answer(ours[1], vllms[1], name)
    if name == "/v1/embeddings":
        assert ours[0] == 200 and len(ours[1]) == len(TEXTS)


def test_a_plugin_request_to_a_server_without_the_plugin_is_vllms_400(no_plugin_server):
    status, message = answer(no_plugin_server, "/pooling", {"data": {"input": TEXTS}})
    assert status == 400, message
