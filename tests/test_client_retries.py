"""The client's retries, timeouts and errors, as httpx users expect them: a
real server stopped and started again, and a real HTTP proxy in front of it
that answers 503 (what a load balancer says while its backend restarts)."""

from __future__ import annotations

import asyncio
import email.utils
import http.server
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bge_m3_sparse_plugin.client import (
    MAX_DELAY_S,
    AsyncSparseEmbeddingClient,
    SparseEmbeddingClient,
    SparseEmbeddingError,
    retry_delay,
)

from .support.requests import plugin_part, raw


def test_retry_delay_doubles_and_follows_retry_after():
    assert [retry_delay(n, 0.5) for n in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert retry_delay(20, 0.5) == MAX_DELAY_S
    assert retry_delay(0, 0.5, "3") == 3.0
    assert retry_delay(0, 0.5, "600") == MAX_DELAY_S
    in_4_s = email.utils.formatdate(time.time() + 4, usegmt=True)
    assert 2.0 < retry_delay(0, 0.5, in_4_s) <= 4.0
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    assert retry_delay(0, 0.5, past) == 0.0
    with pytest.raises(ValueError):
        retry_delay(0, 0.5, "soon")


def test_negative_retries_are_refused():
    with pytest.raises(ValueError, match=r"retries and backoff must be >= 0, got -1 and 0\.5"):
        SparseEmbeddingClient(retries=-1)


class _Proxy(http.server.ThreadingHTTPServer):
    """Answers the first ``unavailable`` POSTs with 503 and ``Retry-After: 0``,
    then forwards each POST to ``upstream``; counts what it saw."""

    def __init__(self, upstream: str, unavailable: int) -> None:
        self.upstream, self.unavailable, self.seen = upstream, unavailable, 0
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _Proxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen += 1
        if self.server.seen <= self.server.unavailable:
            payload = b'{"error": "backend restarting"}'
            self.send_response(503)
            self.send_header("Retry-After", "0")
        else:
            forwarded = urllib.request.Request(
                self.server.upstream + self.path,
                data=body,
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(forwarded, timeout=120) as answer:
                payload = answer.read()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def proxy(server, request):
    srv = _Proxy(server.url, request.param)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [2], indirect=True)
def test_503s_are_tried_again_until_the_answer(server, proxy):
    with SparseEmbeddingClient(proxy.url, retries=2, backoff=5.0) as client:
        started = time.monotonic()
        got = client.embed("I love China")
    assert plugin_part(got) == raw(server, {"input": "I love China"})
    assert proxy.seen == 3
    assert time.monotonic() - started < 5.0  # Retry-After: 0 came before the 5 s backoff


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [3], indirect=True)
def test_the_last_503_raises_with_its_response(proxy):
    async def run() -> None:
        async with AsyncSparseEmbeddingClient(proxy.url, retries=2, backoff=0) as client:
            await client.embed("x")

    with pytest.raises(SparseEmbeddingError) as info:
        asyncio.run(run())
    err = info.value
    assert proxy.seen == 3
    assert (err.status_code, err.message, err.body) == (
        503,
        "backend restarting",
        {"error": "backend restarting"},
    )
    assert err.response.status_code == 503 and err.response.headers["retry-after"] == "0"
    assert err.request is err.response.request and err.request.url == proxy.url + "/pooling"


@pytest.mark.engine
def test_a_refusal_carries_the_response(server):
    with (
        SparseEmbeddingClient(server.url, retries=3) as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.embed([0, 10**6, 2])
    err = info.value
    assert err.response.status_code == 400 and err.response.json() == err.body
    assert err.body["error"]["param"] == "data.input"
    assert err.request.method == "POST" and err.request.url == server.url + "/pooling"


@pytest.mark.engine
def test_a_request_waits_out_a_server_restart(server):
    """The shared server is stopped: a client without retries fails at once; one
    with retries, sent while the server is down, gets its answer once the
    server is back on the same port. The server is running again afterwards."""
    want = raw(server, {"input": "I love China", "return_dense": True})
    server.stop()
    try:
        with (
            SparseEmbeddingClient(server.url, retries=0) as client,
            pytest.raises(httpx.ConnectError),
        ):
            client.embed("I love China")
        sent = []
        http = httpx.Client(event_hooks={"request": [sent.append]}, timeout=120)
        client = SparseEmbeddingClient(server.url, retries=200, backoff=0.5, http_client=http)
        with http, client, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.embed, "I love China", return_dense=True, request_id="r-1")
            time.sleep(3)
            assert not pending.done() and len(sent) >= 2  # refused, and tried again
            server.start_again()
            got = pending.result(timeout=600)
    finally:
        if not server.alive():
            server.start_again()
        server.wait_ready()
    assert plugin_part(got) == want
    assert got.request_id == "pooling-r-1"
