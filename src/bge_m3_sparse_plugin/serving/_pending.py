"""Per-request options kept between ``pre_process`` and ``post_process`` online.

The vLLM releases of ``SUPPORTED_VLLM`` call ``pre_process`` in the request's own asyncio task but
``post_process`` in the renderer's thread pool (``loop.run_in_executor``,
which carries no ``contextvars``): the request id that vLLM passes to both is
the one thing they share, and a client chooses it (``X-Request-Id``, taken
verbatim). So an id belongs to one request in flight at a time: a second
request that arrives with the id of one still in flight is refused, never
given the first one's options.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from .._exceptions import IdInUse, TooManyPending

__all__ = ["PendingRequests"]

T = TypeVar("T")


class PendingRequests(Generic[T]):
    """A bounded map from the request id of each request in flight to what
    ``post_process`` needs.

    :meth:`claim` adds an entry, and refuses an id already held
    (:class:`IdInUse`) or a map already full (:class:`TooManyPending`): no entry
    is ever replaced or evicted, so no request loses its options to another.
    Entries go when the output is post-processed (:meth:`pop`), or by
    :meth:`discard` when the request ends without it (it failed in vLLM after
    ``pre_process``, or its client went away). ``on_change`` is called with the
    new size after each change.
    """

    def __init__(self, max_size: int, on_change: Callable[[int], None] | None = None) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size!r}")
        self.max_size = max_size
        self._entries: dict[str, T] = {}
        self._lock = threading.Lock()
        self._on_change = on_change

    def claim(self, request_id: str, value: T) -> None:
        with self._lock:
            if request_id in self._entries:
                raise IdInUse(request_id)
            if len(self._entries) >= self.max_size:
                raise TooManyPending(self.max_size)
            self._entries[request_id] = value
            self._changed()

    def pop(self, request_id: str) -> T | None:
        with self._lock:
            value = self._entries.pop(request_id, None)
            self._changed()
            return value

    def discard(self, request_id: str, value: T) -> bool:
        """Remove the entry of ``request_id`` if it is still ``value``: a later
        request that took the id once it was free keeps its own. Returns
        whether it was there."""
        with self._lock:
            if self._entries.get(request_id) is value:
                del self._entries[request_id]
                self._changed()
                return True
            return False

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
