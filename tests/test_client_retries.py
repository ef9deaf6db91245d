"""The client's retries, timeouts and errors, as httpx users expect them: a
real server stopped and started again, and a real HTTP proxy in front of it
that answers 503 (what a load balancer says while its backend restarts)."""

from __future__ import annotations

import asyncio
import email.utils
import gc
import http.server
import json
import random
import socket
import struct
import threading
import time
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from bge_m3_sparse_plugin import client as client_module
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
    """A real HTTP proxy in front of ``upstream`` that plays a script: the n-th
    POST gets ``script[n]`` (past its end, ``forward``):

    - ``503``: answers 503 with ``Retry-After: 0``, as a load balancer does
      while its backend restarts;
    - ``reset``: reads the request, then resets the connection (what a client
      sees as httpx.ReadError: the keep-alive race of RESULTS section 10);
    - ``409``: answers the plugin's own 409 for an X-Request-Id in use;
    - ``400``: answers a refusal naming data.documents;
    - ``hold``: waits until :attr:`release` is set, then forwards;
    - ``forward``: forwards to ``upstream`` and answers what it answered.

    Counts the POSTs it saw, and the most that were in flight at once."""

    def __init__(self, upstream: str, script: list[str]) -> None:
        self.upstream, self.script = upstream, list(script)
        self.seen = self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


_CANNED = {
    "503": (503, {"error": "backend restarting"}),
    "409": (
        409,
        {
            "error": {
                "message": "X-Request-Id 'r-1' is in use by another request in flight",
                "type": "Conflict",
                "param": None,
                "code": 409,
            }
        },
    ),
    "400": (
        400,
        {
            "error": {
                "message": "data.documents: refused",
                "type": "BadRequestError",
                "param": "data.documents",
                "code": 400,
            }
        },
    ),
}


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _Proxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            n, self.server.seen = self.server.seen, self.server.seen + 1
            self.server.in_flight += 1
            self.server.most_in_flight = max(self.server.most_in_flight, self.server.in_flight)
        action = self.server.script[n] if n < len(self.server.script) else "forward"
        try:
            self._answer(action, body)
        finally:
            self._done()

    def _done(self) -> None:
        # Before the answer goes out: the client's next request may come as
        # soon as it has this one's answer.
        with self.server.lock:
            if not getattr(self, "counted_out", False):
                self.counted_out = True
                self.server.in_flight -= 1

    def _answer(self, action: str, body: bytes) -> None:
        if action == "reset":
            # SO_LINGER 0: close() sends RST, not FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if action in _CANNED:
            status, answer = _CANNED[action]
            payload = json.dumps(answer).encode()
        else:
            if action == "hold":
                self.server.release.wait(120)
            headers = {"Content-Type": "application/json"}
            if "X-Request-Id" in self.headers:
                headers["X-Request-Id"] = self.headers["X-Request-Id"]
            forwarded = urllib.request.Request(
                self.server.upstream + self.path, data=body, headers=headers
            )
            with urllib.request.urlopen(forwarded, timeout=120) as upstream:
                status, payload = 200, upstream.read()
        self._done()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
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
    srv.release.set()
    srv.shutdown()
    srv.server_close()


class _SleepLog:
    """The client module's ``time``, with each ``sleep`` written down: the
    waits the client chose, in order (the wall clock is never asserted)."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        time.sleep(seconds)

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["503", "503"]], indirect=True)
def test_503s_are_tried_again_until_the_answer(server, proxy, monkeypatch):
    clock = _SleepLog()
    monkeypatch.setattr(client_module, "time", clock)
    with SparseEmbeddingClient(proxy.url, retries=2, backoff=5.0) as client:
        got = client.embed("I love China")
    assert plugin_part(got) == raw(server, {"input": "I love China"})
    assert proxy.seen == 3
    assert clock.slept == [0.0, 0.0]  # Retry-After: 0, not the 5 s backoff


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["503", "503", "503"]], indirect=True)
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
            while len(sent) < 2 and not pending.done():
                time.sleep(0.05)
            assert not pending.done()  # refused, tried again, and still trying
            server.start_again()
            got = pending.result(timeout=600)
    finally:
        if not server.alive():
            server.start_again()
        server.wait_ready()
    assert plugin_part(got) == want
    assert got.request_id == "pooling-r-1"


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["reset"]], indirect=True)
def test_a_reset_connection_is_tried_again(server, proxy):
    """The keep-alive race surfaces mostly as httpx.ReadError: the request
    went out and the connection was reset. A /pooling request is a pure
    function of its body, so the client sends it again."""
    with SparseEmbeddingClient(proxy.url, retries=1, backoff=0) as client:
        got = client.embed("I love China")
    assert plugin_part(got) == raw(server, {"input": "I love China"})
    assert proxy.seen == 2


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["reset", "409"]], indirect=True)
def test_a_409_after_a_reset_is_its_own_earlier_try_and_is_waited_out(server, proxy):
    """A proxy dropped the first try, which may still run on the server and
    hold the request's X-Request-Id: the retry's 409 is tried again, and the
    id's request_id comes back."""
    with SparseEmbeddingClient(proxy.url, retries=3, backoff=0) as client:
        got = client.embed("I love China", request_id="r-1")
    assert plugin_part(got) == raw(server, {"input": "I love China"})
    assert (proxy.seen, got.request_id) == (3, "pooling-r-1")


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["409"]], indirect=True)
def test_a_409_with_nothing_in_doubt_is_another_requests_and_raises(proxy):
    with (
        SparseEmbeddingClient(proxy.url, retries=3, backoff=0) as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.embed("I love China", request_id="r-1")
    assert (info.value.status_code, proxy.seen) == (409, 1)


def _response(status: int, request_id: str | None = None, **headers: str) -> httpx.Response:
    sent = {"X-Request-Id": request_id} if request_id else {}
    request = httpx.Request("POST", "http://127.0.0.1:8000/pooling", headers=sent)
    return httpx.Response(status, headers=headers, request=request)


def test_which_outcomes_are_tried_again():
    def tried(*outcomes) -> list[bool]:
        retries = client_module._Retries(retries=10, backoff=0.1, rng=random.Random(0))
        return [retries.delay(outcome) is not None for outcome in outcomes]

    request = httpx.Request("POST", "http://127.0.0.1:8000/pooling")
    assert tried(httpx.ReadError("reset", request=request)) == [True]
    assert tried(httpx.WriteError("broken pipe", request=request)) == [True]
    assert tried(httpx.PoolTimeout("pool", request=request)) == [True]
    assert tried(httpx.ReadTimeout("slow", request=request)) == [False]
    assert tried(_response(503), _response(500), _response(400)) == [True, False, False]
    assert tried(_response(409, "r-1")) == [False]
    assert tried(httpx.ReadError("reset", request=request), _response(409, "r-1")) == [True, True]
    assert tried(httpx.ReadError("reset", request=request), _response(409)) == [True, False]


def test_waits_are_drawn_up_to_the_backoff_and_retry_after_is_kept():
    rng = random.Random(0)
    firsts = [
        client_module._Retries(retries=1, backoff=1.0, rng=rng).delay(_response(503))
        for _ in range(200)
    ]
    assert all(0.0 <= d <= 1.0 for d in firsts)
    assert len(set(firsts)) == 200  # no two clients wait alike
    retries = client_module._Retries(retries=5, backoff=1.0, rng=rng)
    waits = [retries.delay(_response(503)) for _ in range(5)]
    assert all(0.0 <= d <= bound for d, bound in zip(waits, [1.0, 2.0, 4.0, 8.0, 16.0]))
    retries = client_module._Retries(retries=5, backoff=1.0, rng=rng)
    assert retries.delay(_response(503, **{"Retry-After": "7"})) == 7.0


DOCUMENTS = [f"document {i} about China" for i in range(6 * 64)]  # six batches


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["hold"] * 6], indirect=True)
def test_async_score_keeps_at_most_its_concurrency_in_flight(server, proxy):
    async def run() -> list[dict[str, float]]:
        async with AsyncSparseEmbeddingClient(proxy.url) as client:
            scoring = asyncio.ensure_future(client.score("China", DOCUMENTS, concurrency=2))
            while proxy.in_flight < 2 and not scoring.done():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # room for a third, were the bound broken
            proxy.release.set()
            return await scoring

    got = asyncio.run(run())
    with SparseEmbeddingClient(server.url) as direct:
        assert got == direct.score("China", DOCUMENTS)
    assert (proxy.seen, proxy.most_in_flight) == (6, 2)


@pytest.mark.engine
@pytest.mark.parametrize("proxy", [["400"] + ["hold"] * 5], indirect=True)
def test_async_score_cancels_the_rest_when_one_request_fails(proxy):
    async def run() -> tuple[SparseEmbeddingError, set[asyncio.Task]]:
        async with AsyncSparseEmbeddingClient(proxy.url) as client:
            try:
                await client.score("China", DOCUMENTS, concurrency=3)
            except SparseEmbeddingError as exc:
                return exc, asyncio.all_tasks() - {asyncio.current_task()}
        raise AssertionError("the 400 was not raised")

    err, left = asyncio.run(run())
    assert (err.status_code, err.param) == (400, "data.documents")
    assert left == set()  # nothing still running once the error is raised
    assert proxy.seen <= 3  # the batches after the first three were never sent


@pytest.mark.engine
def test_the_adapters_async_calls_leave_no_connection_open(server):
    from bge_m3_sparse_plugin.integrations._remote import Remote

    remote = Remote(server.url, return_dense=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        vectors = asyncio.run(remote.aencode(["I love China"]))
        scores = asyncio.run(remote.ascore("China", ["I love China"]))
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    data = {"input": "I love China", "return_dense": True, "sparse_format": "indices_values"}
    want = raw(server, data).data[0]
    assert want.sparse_embedding == {"indices": vectors[0].indices, "values": vectors[0].values}
    assert want.dense_embedding == vectors[0].dense
    with SparseEmbeddingClient(server.url) as direct:
        assert scores == direct.score("China", ["I love China"])
