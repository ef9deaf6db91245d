"""Requests to a test server, and checks of their answers, shared by the tests."""

from __future__ import annotations

import asyncio
import math
import re

import httpx

from bge_m3_sparse_plugin.client import PoolingResult
from bge_m3_sparse_plugin.schemas import SparseEmbeddingResponse

from .server import SERVED_MODEL_NAME
from .texts import PARITY_TEXTS

SEED_INPUT = ["I love China", "hi, bge-m3"]


def post(server, body, **kw) -> httpx.Response:
    return httpx.post(server.url + "/pooling", json=body, timeout=120, **kw)


def pooling(server, data: dict, **extra) -> dict:
    resp = post(server, {"model": SERVED_MODEL_NAME, "data": data, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()


def plugin_part(result: PoolingResult) -> SparseEmbeddingResponse:
    """What the plugin answered, without vLLM's request id and time."""
    return SparseEmbeddingResponse(data=result.data, usage=result.usage)


def raw(server, data: dict) -> SparseEmbeddingResponse:
    """The same request sent by hand, read into the response model."""
    return SparseEmbeddingResponse.model_validate(pooling(server, data)["data"])


TOO_LONG = "x " * 1100  # over max_model_len: vLLM refuses it after the plugin's pre_process


TEXTS = list(PARITY_TEXTS.values())


def body(data: dict, **extra) -> dict:
    return {"model": SERVED_MODEL_NAME, "data": data, **extra}


def assert_same_answer(got, want, where="") -> None:
    """Equal structure and values; floats within 1e-5 relative (batching may differ)."""
    if isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), (where, got, want)
        for key in want:
            assert_same_answer(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_answer(g, w, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def mixed_requests() -> list[dict]:
    """Distinct valid data objects: single and batched, every option combination."""
    requests = []
    for i in range(24):
        texts = [TEXTS[(i + k) % len(TEXTS)] for k in range(1 + i % 3)]
        requests.append(
            {
                "input": texts[0] if i % 4 == 0 else texts,
                "return_tokens": bool(i % 2),
                "return_dense": bool(i % 3 == 0),
                "return_sparse": i % 6 != 3,
            }
        )
    return requests


FAILING = [
    {"input": TOO_LONG, "return_tokens": True, "return_dense": True},
    {"input": ["ok", 5]},
    {"input": [], "return_tokens": True},
    {"input": [0, 10**7, 2], "return_dense": True},
]


def request_id_header(k: int) -> dict[str, str]:
    """The k-th request's X-Request-Id: its own for a third, one of five
    shared ones for a third (as proxies and retries reuse them), none for
    the rest."""
    return {0: {"X-Request-Id": f"own-{k}"}, 1: {"X-Request-Id": f"shared-{k % 5}"}}.get(k % 3, {})


def check_concurrent_mixed_requests(server, headers: dict[str, str] | None = None) -> None:
    """144 requests in flight at once, 24 failing ones interleaved, a third
    of them with their own X-Request-Id and a third sharing five: each valid
    one gets exactly the answer it gets alone, each failing one a 400, and
    a request whose id another request in flight holds a 409 naming it."""
    requests = mixed_requests()
    alone = []
    for data in requests:
        resp = post(server, body(data), headers=headers)
        assert resp.status_code == 200, resp.text
        alone.append(resp.json()["data"])

    # 120 valid requests (each distinct one 5 times) with 24 failing ones
    # interleaved, all in flight at once.
    schedule = []
    for round_ in range(5):
        for i, data in enumerate(requests):
            schedule.append(("ok", i, data))
            if i % 5 == round_ % 5:
                schedule.append(("fail", None, FAILING[len(schedule) % len(FAILING)]))

    async def run():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:
            return await asyncio.gather(
                *(
                    client.post(server.url + "/pooling", json=body(d), headers=request_id_header(k))
                    for k, (_, _, d) in enumerate(schedule)
                )
            )

    responses = asyncio.run(run())
    assert len(responses) == 144
    outcomes = []
    for k, ((kind, i, _), resp) in enumerate(zip(schedule, responses)):
        shared = request_id_header(k).get("X-Request-Id", "").startswith("shared-")
        if resp.status_code == 409 and shared:
            sent = request_id_header(k)["X-Request-Id"]
            assert resp.json()["error"]["message"].startswith(f"X-Request-Id '{sent}' is in use")
            outcomes.append("409")
        elif kind == "fail":
            outcomes.append(str(resp.status_code))
        else:
            assert resp.status_code == 200, (k, resp.text)
            assert_same_answer(resp.json()["data"], alone[i], f"request {k} (data {i})")
            outcomes.append("200")
    # The failing ones that pass pre_process (too long for vLLM) may meet a
    # shared id in use; the others are refused by the plugin's checks first.
    fail_statuses = {o for (kind, _, _), o in zip(schedule, outcomes) if kind == "fail"}
    assert fail_statuses <= {"400", "409"}, fail_statuses
    # Only a shared id is ever refused, and no request ever got a 5xx.
    refused = [k for k, o in enumerate(outcomes) if o == "409"]
    assert all(k % 3 == 1 for k in refused), refused


def pending_requests(srv) -> float:
    """The plugin's bge_m3_sparse_pending_requests gauge, from vLLM's /metrics."""
    metrics = httpx.get(srv.url + "/metrics", timeout=30).text
    found = re.search(r"^bge_m3_sparse_pending_requests (\S+)$", metrics, re.MULTILINE)
    assert found, "no bge_m3_sparse_pending_requests on /metrics"
    return float(found[1])
