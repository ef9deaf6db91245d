"""The plugin's own Prometheus gauge, served on vLLM's ``/metrics``."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["PENDING_METRIC", "set_pending"]

PENDING_METRIC = "bge_m3_sparse_pending_requests"

_gauge: Any = None
_lock = threading.Lock()


def _pending_gauge() -> Any:
    # Created on first use, once per process: vLLM's /metrics reads the
    # default registry (or, with several API servers, PROMETHEUS_MULTIPROC_DIR,
    # where "livesum" adds up the live processes' values).
    global _gauge  # noqa: PLW0603 -- one gauge per process, made on first use
    with _lock:
        if _gauge is None:
            from prometheus_client import Gauge

            _gauge = Gauge(
                PENDING_METRIC,
                "Requests whose options the plugin holds between pre- and post-processing",
                multiprocess_mode="livesum",
            )
        return _gauge


def set_pending(size: int) -> None:
    _pending_gauge().set(size)
