"""A real vLLM server with the plugin, for the benchmarks that need one, and
the measurements taken on it: the API server's memory, and a probe client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil

from bge_m3_sparse_plugin import HF_OVERRIDES

SERVED_MODEL_NAME = "bge-m3-tiny"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BenchServer:
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1, stopped
    with its engine on ``stop()``. ``pid`` is the API-server process."""

    def __init__(self, model: Path, log: Path, extra_args: list[str] = (), env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "wb")  # noqa: SIM115 -- open while the server runs; stop() closes it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(model),
                "--served-model-name",
                SERVED_MODEL_NAME,
                "--runner",
                "pooling",
                "--hf-overrides",
                json.dumps(HF_OVERRIDES),
                "--io-processor-plugin",
                "bge_m3_sparse_plugin",
                "--dtype",
                "float32",
                "--gpu-memory-utilization",
                "0.2",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *extra_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        self.pid = self.proc.pid
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}; see {log}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2):
                    return
            except OSError:
                time.sleep(1)
        self.stop()
        raise TimeoutError(f"the server did not answer in 420 s; see {log}")

    def rss_mb(self) -> float:
        return psutil.Process(self.pid).memory_info().rss / 2**20

    def engine_rss_mb(self) -> float:
        children = psutil.Process(self.pid).children(recursive=True)
        return sum(c.memory_info().rss for c in children) / 2**20

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class PeakRss:
    """Samples a process's RSS every ``interval`` s in a thread, between start and stop."""

    def __init__(self, sample, interval: float = 0.05) -> None:
        self._sample = sample
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0.0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._sample())
            except psutil.Error:
                return
            time.sleep(self._interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Probe:
    """Another client: one small request after another, in a thread, each
    latency recorded, while the main thread does something else."""

    BODY: ClassVar[dict[str, Any]] = {"model": SERVED_MODEL_NAME, "data": {"input": "I love China"}}

    def __init__(self, url: str, pause: float = 0.05) -> None:
        self._url = url + "/pooling"
        self._pause = pause
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.failures = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=300) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    ok = client.post(self._url, json=self.BODY).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - start)
                self.failures += not ok
                time.sleep(self._pause)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
