"""How dense and ColBERT vectors travel: JSON numbers (``"float"``), or each
vector's little-endian float32 bytes in base64 (``"base64"``), as OpenAI's
embeddings API and vLLM's ``/v1/embeddings`` send them. Pure: numpy only.

A dense vector is one string; ColBERT vectors are one string per token
vector, so that a reader needs no shape beside them. Encoding reads the
array's bytes as they are: no Python object per value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "LITTLE_FLOAT32",
    "matrix_from_wire",
    "rows_to_base64",
    "to_base64",
    "vector_from_wire",
]

LITTLE_FLOAT32 = np.dtype("<f4")


def to_base64(vector: np.ndarray) -> str:
    """One vector's float32 values as little-endian bytes, in base64."""
    data = np.ascontiguousarray(vector, dtype=LITTLE_FLOAT32)
    return base64.b64encode(data.tobytes()).decode("ascii")


def rows_to_base64(matrix: np.ndarray) -> list[str]:
    """Each row of a (tokens, hidden) matrix as :func:`to_base64` gives it."""
    data = np.ascontiguousarray(matrix, dtype=LITTLE_FLOAT32)  # (tokens, hidden)
    raw, width = data.tobytes(), data.shape[1] * LITTLE_FLOAT32.itemsize
    encode = base64.b64encode
    return [encode(raw[i * width : (i + 1) * width]).decode("ascii") for i in range(len(data))]


def vector_from_wire(value: Sequence[float] | str) -> np.ndarray:
    """A dense vector as the server sent it (JSON numbers or base64), as float32."""
    if isinstance(value, str):
        return _decode(value)
    return np.asarray(value, dtype=np.float32)


def matrix_from_wire(value: Sequence[Any]) -> np.ndarray:
    """ColBERT vectors as the server sent them (rows of numbers, or one base64
    string a row), as a (tokens, hidden) float32 array."""
    if not value:  # no ColBERT vector (an input of the start token alone)
        return np.zeros((0, 0), dtype=np.float32)
    if isinstance(value[0], str):
        return np.stack([_decode(row) for row in value])
    return np.asarray(value, dtype=np.float32).reshape(len(value), -1)


def _decode(text: str) -> np.ndarray:
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not a base64 vector: {exc}") from None
    if len(raw) % LITTLE_FLOAT32.itemsize:
        raise ValueError(f"a base64 vector of {len(raw)} bytes is not float32 values")
    return np.frombuffer(raw, dtype=LITTLE_FLOAT32).astype(np.float32)
