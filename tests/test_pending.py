"""The per-request options map: keyed, removed on use, bounded."""

from __future__ import annotations

import logging

import pytest

from bge_m3_sparse_plugin.pending import PendingRequests


def test_keyed_and_removed_on_pop():
    pending = PendingRequests[str](max_size=10)
    pending.put("a", "options-a")
    pending.put("b", "options-b")
    assert pending.pop("b") == "options-b"  # order of arrival does not matter
    assert pending.pop("a") == "options-a"
    assert pending.pop("a") is None
    assert len(pending) == 0


def test_same_id_replaces_a_stale_entry():
    pending = PendingRequests[str](max_size=10)
    pending.put("retry", "failed-request")
    pending.put("retry", "new-request")
    assert len(pending) == 1
    assert pending.pop("retry") == "new-request"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_bounded_evicts_oldest_and_logs():
    # Attached to the plugin's own logger: whatever vLLM does with propagation.
    from bge_m3_sparse_plugin.pending import logger

    handler = _Records()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        pending = PendingRequests[int](max_size=3)
        for i in range(5):
            pending.put(f"r{i}", i)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert len(pending) == 3
    assert [pending.pop(f"r{i}") for i in range(5)] == [None, None, 2, 3, 4]
    evicted = [r.getMessage() for r in handler.records if "dropped the options" in r.getMessage()]
    assert len(evicted) == 2 and "'r0'" in evicted[0] and "'r1'" in evicted[1]


def test_bound_must_be_positive():
    with pytest.raises(ValueError, match="max_size must be >= 1, got 0"):
        PendingRequests(max_size=0)


def test_discard_removes_only_its_own_entry():
    pending = PendingRequests[list](max_size=10)
    failed, retried = ["failed"], ["retried"]
    pending.put("r", failed)
    pending.put("r", retried)  # a retry with the same X-Request-Id
    assert not pending.discard("r", failed)  # the failed request's end leaves the retry's entry
    assert pending.discard("r", retried)
    assert len(pending) == 0
    assert not pending.discard("r", retried)


def test_on_change_reports_every_size():
    sizes: list[int] = []
    pending = PendingRequests[int](max_size=2, on_change=sizes.append)
    pending.put("a", 1)
    pending.put("b", 2)
    pending.put("c", 3)  # evicts "a"
    pending.pop("b")
    pending.discard("c", 3)
    assert sizes == [1, 2, 2, 1, 0]
