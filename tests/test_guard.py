"""guard_model_routes on vLLM's own AuthenticationMiddleware, in an app of
routes like vLLM's (a plugin route, a SageMaker-style route, a route no vLLM
has yet, probes, a mounted /metrics), served in-process: no engine needed."""

from __future__ import annotations

import importlib

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.responses import PlainTextResponse

from bge_m3_sparse_plugin.serving._guard import MIDDLEWARE_MODULES, guard_model_routes

KEY = "k3y"
UNAUTHORIZED = (401, {"error": "Unauthorized"})


def _app(middleware: type) -> FastAPI:
    app = FastAPI()
    for path in ("/pooling", "/invocations", "/score", "/a_route_of_vllm_0_99", "/tokenize"):
        app.add_api_route(path, lambda: {"ran": True}, methods=["POST"])
    for path in ("/health", "/ping", "/version", "/v1/models", "/items/{item_id}"):
        app.add_api_route(path, lambda: {"ran": True}, methods=["GET"])
    app.mount("/metrics", PlainTextResponse("vllm:metric 1"))
    app.add_middleware(middleware, tokens=[KEY])
    return app


@pytest.fixture(scope="module")
def client() -> TestClient:
    name = guard_model_routes()
    assert name == MIDDLEWARE_MODULES[0]  # vLLM 0.29 and later keep it there
    middleware = importlib.import_module(name).AuthenticationMiddleware
    return TestClient(_app(middleware))


# Every route but the open ones, and what vLLM's prefixes already guard.
GUARDED = [
    ("POST", "/pooling"),
    ("POST", "/invocations"),
    ("POST", "/score"),
    ("POST", "/a_route_of_vllm_0_99"),
    ("GET", "/v1/models"),
    ("GET", "/items/7"),  # a path parameter
    ("GET", "/pooling"),  # the route's path with another method: a 405 once the key is right
]
OPEN = [("GET", "/health"), ("GET", "/ping"), ("GET", "/version"), ("POST", "/tokenize")]


@pytest.mark.parametrize("method,path", GUARDED)
def test_each_route_that_runs_the_model_needs_the_key(client, method, path):
    refused = [
        client.request(method, path, headers=headers)
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY})
    ]
    assert [(r.status_code, r.json()) for r in refused] == [UNAUTHORIZED] * 3
    right = client.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
    assert right.status_code == (405 if (method, path) == ("GET", "/pooling") else 200)


@pytest.mark.parametrize("method,path", OPEN)
def test_the_open_routes_stay_open(client, method, path):
    resp = client.request(method, path)
    assert (resp.status_code, resp.json()) == (200, {"ran": True})


def test_mounted_metrics_stay_open_and_unknown_paths_keep_vllms_rule(client):
    assert client.get("/metrics").text == "vllm:metric 1"
    assert client.get("/no-such-route").status_code == 404
    assert client.get("/v1/no-such-route").status_code == 401  # vLLM's own prefix rule


def test_options_requests_pass_as_vllm_lets_them(client):
    assert client.options("/pooling").status_code == 405  # no CORS here: FastAPI's own answer


def test_wrapping_twice_changes_nothing(client):
    middleware = importlib.import_module(MIDDLEWARE_MODULES[0]).AuthenticationMiddleware
    call = middleware.__call__
    guard_model_routes()
    assert middleware.__call__ is call
