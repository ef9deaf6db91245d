"""Per-request options kept between ``pre_process`` and ``post_process``."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["PendingRequests"]

# A child of the "vllm" logger: our lines go where vLLM's go, at its level.
logger = logging.getLogger("vllm.plugins." + __name__)

T = TypeVar("T")


class PendingRequests(Generic[T]):
    """A bounded map from request id to what ``post_process`` needs.

    Entries are removed when the request's output is post-processed, or by
    :meth:`discard` when the request ends without it (it failed in vLLM after
    ``pre_process``, or its client went away). Past ``max_size`` the oldest
    entry is evicted and logged, so that the map stays bounded even where no
    one calls :meth:`discard`. A new request with the id of a stale entry
    replaces it. ``on_change`` is called with the new size after each change.
    """

    def __init__(self, max_size: int, on_change: Callable[[int], None] | None = None) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size!r}")
        self.max_size = max_size
        self._entries: OrderedDict[str | None, T] = OrderedDict()
        self._lock = threading.Lock()
        self._on_change = on_change

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
            self._changed()

    def pop(self, request_id: str | None) -> T | None:
        with self._lock:
            value = self._entries.pop(request_id, None)
            self._changed()
            return value

    def discard(self, request_id: str | None, value: T) -> bool:
        """Remove the entry of ``request_id`` if it is still ``value``: a later
        request that reused the id keeps its own. Returns whether it was there."""
        with self._lock:
            if request_id in self._entries and self._entries[request_id] is value:
                del self._entries[request_id]
                self._changed()
                return True
            return False

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
