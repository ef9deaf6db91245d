"""Requests that share an X-Request-Id never get each other's options.

vLLM names an online request ``pooling-<X-Request-Id>``, taking the header
verbatim, and hands the plugin that name in pre_process and post_process. Here
40 pairs of concurrent requests each share one id: one of a pair asks for
tokens, the other for ``top_k: 1``. Each answer must be exactly its own (the
answer it gets alone), or a 409 that names the header, never the other's
options and never a 5xx. On one API-server process and on two.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .support.requests import assert_same_answer, pending_requests
from .support.server import API_KEY, SERVED_MODEL_NAME
from .support.texts import PARITY_TEXTS

pytestmark = pytest.mark.engine

PAIRS = 40
TEXTS = list(PARITY_TEXTS.values())
RIGHT = {"Authorization": f"Bearer {API_KEY}"}


def pair(i: int) -> tuple[dict, dict]:
    """Two requests that differ in input and in every option that shows."""
    tokens = {"input": TEXTS[i % len(TEXTS)], "return_tokens": True}
    pruned = {"input": [TEXTS[(i + 1) % len(TEXTS)], TEXTS[(i + 2) % len(TEXTS)]], "top_k": 1}
    return tokens, pruned


def body(data: dict) -> dict:
    return {"model": SERVED_MODEL_NAME, "data": data}


def check_pairs(server, headers: dict[str, str]) -> list[int]:
    """Send the pairs, all at once; returns each response's status, in order."""
    datas = [data for i in range(PAIRS) for data in pair(i)]
    alone = {}
    for data in datas:  # each one alone, with no id: the answer it must get
        resp = httpx.post(server.url + "/pooling", json=body(data), headers=headers, timeout=120)
        assert resp.status_code == 200, resp.text
        alone[repr(data)] = resp.json()["data"]

    async def run():
        limits = httpx.Limits(max_connections=2 * PAIRS, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        server.url + "/pooling",
                        json=body(data),
                        headers={"X-Request-Id": f"shared-{k // 2}"},
                    )
                    for k, data in enumerate(datas)
                )
            )

    responses = asyncio.run(run())
    for k, (data, resp) in enumerate(zip(datas, responses)):
        if resp.status_code == 409:
            assert resp.json() == {
                "error": {
                    "message": f"X-Request-Id 'shared-{k // 2}' is in use by another request in "
                    "flight on this server; send each concurrent request with its own "
                    "X-Request-Id (or none, and vLLM makes one)",
                    "type": "Conflict",
                    "param": None,
                    "code": 409,
                }
            }
            continue
        assert resp.status_code == 200, (k, resp.text)
        assert resp.json()["request_id"] == f"pooling-shared-{k // 2}"
        assert_same_answer(resp.json()["data"], alone[repr(data)], f"request {k}")
    statuses = [r.status_code for r in responses]
    # At most one of a pair is refused: the id is free again once the other ends.
    assert all(statuses[2 * i : 2 * i + 2].count(200) >= 1 for i in range(PAIRS)), statuses
    assert pending_requests(server) == 0
    return statuses


def test_pairs_sharing_an_id_each_get_their_own_answer_or_a_409(server):
    check_pairs(server, {})


def test_an_id_in_flight_is_refused_until_its_request_ends(server):
    """Held in flight for certain: a request of 256 texts of 1,000 tokens
    (seconds on this machine; the plugin's gauge says when it is in), then a
    small one with the same id: a 409, and the first gets its own answer."""
    big = {"input": ["the " * 998] * 256, "top_k": 3}

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            first = asyncio.create_task(
                client.post("/pooling", json=body(big), headers={"X-Request-Id": "held"})
            )
            while pending_requests(server) < 1:  # the first is past pre_process
                await asyncio.sleep(0.01)
            second = await client.post(
                "/pooling", json=body({"input": "I love China"}), headers={"X-Request-Id": "held"}
            )
            return await first, second

    first, second = asyncio.run(run())
    assert (first.status_code, second.status_code) == (200, 409), second.text
    alone = httpx.post(
        server.url + "/pooling", json=body({"input": big["input"][0], "top_k": 3}), timeout=120
    ).json()["data"]["data"][0]["sparse_embedding"]
    items = first.json()["data"]["data"]
    assert len(items) == 256
    for item in items:
        assert_same_answer(item["sparse_embedding"], alone)
    assert pending_requests(server) == 0


def test_pairs_sharing_an_id_through_two_api_servers(keyed_server):
    # Each process keeps its own map: a pair split over both is answered twice.
    check_pairs(keyed_server, RIGHT)


def test_a_refused_id_is_free_once_its_holder_ends(server):
    data = {"input": ["I love China"], "return_dense": True}
    ok = httpx.post(
        server.url + "/pooling",
        json=body(data),
        headers={"X-Request-Id": "again"},
        timeout=120,
    )
    again = httpx.post(
        server.url + "/pooling",
        json=body({"input": "I love China", "top_k": 1}),
        headers={"X-Request-Id": "again"},
        timeout=120,
    )
    assert (ok.status_code, again.status_code) == (200, 200), again.text
    assert len(again.json()["data"]["data"][0]["sparse_embedding"]) == 1
    assert "dense_embedding" not in again.json()["data"]["data"][0]
