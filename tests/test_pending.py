"""The map of requests in flight: keyed, removed on use, never replaced, bounded."""

from __future__ import annotations

import pytest

from bge_m3_sparse_plugin._exceptions import IdInUse, TooManyPending
from bge_m3_sparse_plugin.serving._pending import PendingRequests


def test_keyed_and_removed_on_pop():
    pending = PendingRequests[str](max_size=10)
    pending.claim("a", "options-a")
    pending.claim("b", "options-b")
    assert pending.pop("b") == "options-b"  # order of arrival does not matter
    assert pending.pop("a") == "options-a"
    assert pending.pop("a") is None
    assert len(pending) == 0


def test_an_id_in_flight_is_refused_and_keeps_its_options():
    pending = PendingRequests[str](max_size=10)
    pending.claim("shared", "first")
    with pytest.raises(IdInUse) as info:
        pending.claim("shared", "second")
    assert info.value.request_id == "shared"
    assert pending.pop("shared") == "first"
    pending.claim("shared", "second")  # free again once the first is done
    assert pending.pop("shared") == "second"


def test_a_full_map_refuses_and_evicts_nothing():
    pending = PendingRequests[int](max_size=3)
    for i in range(3):
        pending.claim(f"r{i}", i)
    with pytest.raises(TooManyPending) as info:
        pending.claim("r3", 3)
    assert info.value.max_size == 3
    assert [pending.pop(f"r{i}") for i in range(4)] == [0, 1, 2, None]


def test_bound_must_be_positive():
    with pytest.raises(ValueError, match="max_size must be >= 1, got 0"):
        PendingRequests(max_size=0)


def test_discard_removes_only_its_own_entry():
    pending = PendingRequests[list](max_size=10)
    failed, retried = ["failed"], ["retried"]
    pending.claim("r", failed)
    assert pending.pop("r") is failed  # answered; its task has not ended yet
    pending.claim("r", retried)  # a retry with the same X-Request-Id
    assert not pending.discard("r", failed)  # the first task's end leaves the retry's entry
    assert pending.discard("r", retried)
    assert len(pending) == 0
    assert not pending.discard("r", retried)


def test_on_change_reports_every_size():
    sizes: list[int] = []
    pending = PendingRequests[int](max_size=2, on_change=sizes.append)
    pending.claim("a", 1)
    pending.claim("b", 2)
    pending.pop("b")
    pending.discard("a", 1)
    assert sizes == [1, 2, 1, 0]
