"""Per-request options kept between ``pre_process`` and ``post_process``."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["PendingRequests"]

# A child of the "vllm" logger: our lines go where vLLM's go, at its level.
logger = logging.getLogger("vllm.plugins." + __name__)

T = TypeVar("T")


class PendingRequests(Generic[T]):
    """A bounded map from request id to what ``post_process`` needs.

    Entries are removed when the request's output is post-processed. A request
    that never reaches ``post_process`` (it failed in vLLM after
    ``pre_process``, or its client went away) leaves its entry behind, so the
    map is bounded: past ``max_size`` the oldest entry is evicted and logged.
    A new request with the id of a stale entry replaces it.
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size!r}")
        self.max_size = max_size
        self._entries: OrderedDict[str | None, T] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, request_id: str | None, value: T) -> None:
        with self._lock:
            self._entries.pop(request_id, None)
            self._entries[request_id] = value
            while len(self._entries) > self.max_size:
                evicted, _ = self._entries.popitem(last=False)
                logger.warning(
                    "bge_m3_sparse_plugin: dropped the options of request %r, which "
                    "never finished; %d requests pending, at most %d kept",
                    evicted,
                    len(self._entries),
                    self.max_size,
                )

    def pop(self, request_id: str | None) -> T | None:
        with self._lock:
            return self._entries.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._entries)
