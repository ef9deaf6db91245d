"""The keep-alive race behind a fuzz run's "Connection reset by peer".

vLLM's server (uvicorn) closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE
(5 s); httpx's pool keeps one for 5 s by default. A request sent on a pooled
connection just under 5 s after the last answer can reach the server as it
closes that connection: the kernel answers with a reset. Side by side in one
run, on one server: httpx's default expiry, and the typed client's
(KEEPALIVE_EXPIRY_S), each sending requests 4.990 to 4.999 s apart, in
steps of 1 ms: the last milliseconds before the server's 5 s, where the
resets were seen.

    python benchmarks/keepalive_race.py [--requests 40]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx
from _common import model_dir
from _server import BenchServer

from bge_m3_sparse_plugin.client import KEEPALIVE_EXPIRY_S

BODY = {"data": {"input": "I love China"}}


def resets(url: str, expiry: float, requests: int) -> dict[str, int]:
    """Transport errors by kind: the reset (ReadError), or the server's close
    seen before any answer (RemoteProtocolError), the two faces of the race."""
    found: dict[str, int] = {}
    limits = httpx.Limits(keepalive_expiry=expiry)
    with httpx.Client(timeout=30, limits=limits) as client:
        client.post(url + "/pooling", json=BODY).raise_for_status()
        for i in range(requests):
            time.sleep(4.990 + (i % 10) * 0.001)
            try:
                client.post(url + "/pooling", json=BODY).raise_for_status()
            except httpx.TransportError as exc:
                found[type(exc).__name__] = found.get(type(exc).__name__, 0) + 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    server = BenchServer(model_dir("small"), Path("/tmp/keepalive_race_server.log"))
    try:
        for label, expiry in (("httpx's default", 5.0), ("the client's", KEEPALIVE_EXPIRY_S)):
            found = resets(server.url, expiry, args.requests)
            print(
                f"keepalive_expiry {expiry:g} s ({label}): {sum(found.values())} of "
                f"{args.requests} failed {found or ''}"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
