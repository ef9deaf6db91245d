"""The limits read from the environment when the processor starts."""

from __future__ import annotations

import pytest

from bge_m3_sparse_plugin._config import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_INPUTS,
    DEFAULT_MAX_PENDING,
    Limits,
)


def test_defaults_when_unset(monkeypatch):
    for name in (
        "BGE_M3_SPARSE_MAX_INPUTS",
        "BGE_M3_SPARSE_MAX_CHARS",
        "BGE_M3_SPARSE_MAX_PENDING",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BGE_M3_SPARSE_MAX_CHARS", "")  # empty is unset
    assert Limits.from_env() == Limits(1024, 8_000_000, 65536)
    assert (DEFAULT_MAX_INPUTS, DEFAULT_MAX_CHARS, DEFAULT_MAX_PENDING) == (1024, 8_000_000, 65536)


def test_each_variable_sets_its_limit(monkeypatch):
    monkeypatch.setenv("BGE_M3_SPARSE_MAX_INPUTS", "7")
    monkeypatch.setenv("BGE_M3_SPARSE_MAX_CHARS", "1000")
    monkeypatch.setenv("BGE_M3_SPARSE_MAX_PENDING", "3")
    assert Limits.from_env() == Limits(max_inputs=7, max_chars=1000, max_pending=3)


@pytest.mark.parametrize("raw", ["0", "-5", "ten", "1.5"])
def test_a_bad_value_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("BGE_M3_SPARSE_MAX_CHARS", raw)
    with pytest.raises(
        ValueError, match=f"BGE_M3_SPARSE_MAX_CHARS must be a positive integer, got '{raw}'"
    ):
        Limits.from_env()
