"""--sink qdrant:URL sends its API key: to a server that checks the header.

No Qdrant server runs here (the embedded mode has no API key), so this is a
small HTTP server that answers the four REST calls the sink makes, as Qdrant
1.x answers them, and refuses with 401 (as Qdrant Cloud does) any request
without the right ``api-key`` header. Each request's header is recorded: the
test compares them whole.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bge_m3_sparse_plugin._config import QDRANT_API_KEY_ENV
from bge_m3_sparse_plugin._exceptions import SinkError
from bge_m3_sparse_plugin.index._output import ShardRows
from bge_m3_sparse_plugin.index._sinks import open_reporting_sink, parse_sink

KEY = "Key-7f3c?9"


class FakeQdrant(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, str, str | None]] = []  # method, path, api-key
        self.points: dict[str, dict] = {}
        self.collections: set[str] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeQdrant

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        path = self.path.split("?")[0]
        self.server.seen.append((self.command, path, self.headers.get("api-key")))
        if self.headers.get("api-key") != KEY:
            self._answer(401, {"status": {"error": "Must provide an API key"}})
            return
        ok = lambda result: self._answer(200, {"result": result, "status": "ok", "time": 0})  # noqa: E731
        if path == "/":
            self._answer(200, {"title": "qdrant - vector search engine", "version": "1.12.0"})
        elif m := re.fullmatch(r"/collections/(\w+)/exists", path):
            ok({"exists": m.group(1) in self.server.collections})
        elif m := re.fullmatch(r"/collections/(\w+)", path):
            self.server.collections.add(m.group(1))
            ok(True)
        elif re.fullmatch(r"/collections/\w+/points", path):
            for point in body["points"]:
                self.server.points[point["payload"]["id"]] = point
            ok({"operation_id": 0, "status": "completed"})
        else:
            self._answer(404, {"status": {"error": f"no {path} here"}})

    do_GET = do_PUT = do_POST = _handle


@pytest.fixture
def qdrant() -> Iterator[FakeQdrant]:
    server = FakeQdrant()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


ROWS = ShardRows(ids=["a", "b"], indices=[[5, 9], [7]], values=[[0.5, 0.25], [0.125]])


def _load(sink_text: str) -> None:
    sink = open_reporting_sink(parse_sink(sink_text, "docs"), None)
    try:
        sink.upsert(ROWS)
    finally:
        sink.close()


def test_the_api_key_in_the_url_is_sent_with_every_request(qdrant, monkeypatch):
    monkeypatch.delenv(QDRANT_API_KEY_ENV, raising=False)
    _load(f"qdrant:{qdrant.url}?api_key={KEY.replace('?', '%3F')}&timeout=5")
    assert qdrant.seen and {key for _, _, key in qdrant.seen} == {KEY}
    assert [method for method, path, _ in qdrant.seen if path == "/collections/docs/points"] == [
        "PUT"
    ]
    assert {i: p["vector"]["sparse"] for i, p in qdrant.points.items()} == {
        "a": {"indices": [5, 9], "values": [0.5, 0.25]},
        "b": {"indices": [7], "values": [0.125]},
    }


def test_the_api_key_from_the_environment_is_sent(qdrant, monkeypatch):
    monkeypatch.setenv(QDRANT_API_KEY_ENV, KEY)
    _load(f"qdrant:{qdrant.url}")
    assert qdrant.seen and {key for _, _, key in qdrant.seen} == {KEY}
    assert sorted(qdrant.points) == ["a", "b"]


def test_a_wrong_key_is_refused_by_the_server_and_never_shown(qdrant, monkeypatch):
    monkeypatch.setenv(QDRANT_API_KEY_ENV, "Wrong-" + KEY)
    with pytest.raises(SinkError) as failed:
        _load(f"qdrant:{qdrant.url}")
    assert "401" in str(failed.value) or "Unauthorized" in str(failed.value)
    assert KEY not in str(failed.value)
    assert qdrant.points == {}


@pytest.mark.parametrize(
    "query,named",
    [("prefix=v1", "'prefix'"), ("api_key=k&https=1", "'https'")],
)
def test_a_query_parameter_the_client_would_drop_is_refused_by_name(query, named):
    with pytest.raises(ValueError) as refused:
        parse_sink(f"qdrant:http://127.0.0.1:1?{query}", "docs")
    assert named in str(refused.value) and "takes the query parameters api_key, timeout" in str(
        refused.value
    )


def test_a_user_and_password_are_refused_without_showing_the_password():
    with pytest.raises(ValueError) as refused:
        parse_sink(f"qdrant:http://user:{KEY}@127.0.0.1:1", "docs")
    assert "Qdrant takes an API key" in str(refused.value) and KEY not in str(refused.value)
