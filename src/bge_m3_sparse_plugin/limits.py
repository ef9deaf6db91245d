"""The server's limits per request and on held state: names, defaults, and how
they are read from the environment. Imports neither vLLM nor torch."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_INPUTS",
    "DEFAULT_MAX_PENDING",
    "MAX_CHARS_ENV",
    "MAX_INPUTS_ENV",
    "MAX_PENDING_ENV",
    "Limits",
]

MAX_INPUTS_ENV = "BGE_M3_SPARSE_MAX_INPUTS"
MAX_CHARS_ENV = "BGE_M3_SPARSE_MAX_CHARS"
MAX_PENDING_ENV = "BGE_M3_SPARSE_MAX_PENDING"
DEFAULT_MAX_INPUTS = 1024
# Characters of text in one request. Tokenizing them is the cost the plugin
# can refuse before it is paid: benchmarks/RESULTS.md ("Limits") has the figures.
DEFAULT_MAX_CHARS = 8_000_000
DEFAULT_MAX_PENDING = 65536


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment, or ``default`` when unset."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return value


@dataclass(frozen=True)
class Limits:
    max_inputs: int = DEFAULT_MAX_INPUTS
    max_chars: int = DEFAULT_MAX_CHARS
    max_pending: int = DEFAULT_MAX_PENDING

    @classmethod
    def from_env(cls) -> Limits:
        return cls(
            max_inputs=env_int(MAX_INPUTS_ENV, DEFAULT_MAX_INPUTS),
            max_chars=env_int(MAX_CHARS_ENV, DEFAULT_MAX_CHARS),
            max_pending=env_int(MAX_PENDING_ENV, DEFAULT_MAX_PENDING),
        )
