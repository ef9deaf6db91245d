"""A real vLLM server with the plugin, for the benchmarks that need one, and
the measurements taken on it: the API server's memory, and a probe client."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx
import psutil

# The tests' launcher, the one copy of the server's arguments.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.server import SERVED_MODEL_NAME, Server

__all__ = [
    "GPU_ARGS",
    "SERVED_MODEL_NAME",
    "BenchServer",
    "HealthProbe",
    "PeakRss",
    "Probe",
    "percentile",
]

# A server on a GPU: float16, and most of its memory for the engine's batches.
GPU_ARGS = ["--dtype", "float16", "--gpu-memory-utilization", "0.85"]


class BenchServer(Server):
    """The tests' server (``python -m vllm.entrypoints.openai.api_server`` on
    127.0.0.1, stopped with its engine on ``stop()``), ready when made, and
    its processes' memory. ``pid`` is the API-server process."""

    def __init__(self, model: Path, log: Path, extra_args: list[str] = (), env: dict | None = None):
        super().__init__(model, log, list(extra_args), env)
        self.pid = self.proc.pid
        try:
            self.wait_ready()
        except Exception:
            self.stop()
            raise

    def rss_mb(self) -> float:
        return psutil.Process(self.pid).memory_info().rss / 2**20

    def engine_rss_mb(self) -> float:
        children = psutil.Process(self.pid).children(recursive=True)
        return sum(c.memory_info().rss for c in children) / 2**20


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


class HealthProbe(Probe):
    """GET /health, one after another: how long the API server's event loop
    keeps other work waiting (the engine plays no part in the answer)."""

    def _run(self) -> None:
        url = self._url.removesuffix("/pooling") + "/health"
        with httpx.Client(timeout=300) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    ok = client.get(url).status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.latencies.append(time.perf_counter() - start)
                self.failures += not ok
                time.sleep(self._pause)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
