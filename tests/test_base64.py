"""Dense and ColBERT vectors as base64 (``encoding_format``): the same float32
values, bit for bit, as the JSON numbers of the default encoding, online,
offline, through the typed client and the adapters; decoded by numpy's own
reading of little-endian float32, not by the code under test."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bge_m3_sparse_plugin._vectors import (
    matrix_from_wire,
    rows_to_base64,
    to_base64,
    vector_from_wire,
)
from bge_m3_sparse_plugin.client import AsyncSparseEmbeddingClient, SparseEmbeddingClient

from .support.requests import pooling, post
from .support.server import SERVED_MODEL_NAME
from .support.texts import LONG_TEXT, PARITY_TEXTS

TEXTS = [*PARITY_TEXTS.values(), LONG_TEXT]
ALL = {"return_dense": True, "return_colbert_vecs": True}


def little_float32(text: str) -> np.ndarray:
    """A base64 string as the reader of OpenAI's format reads it."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4")


def bits(values) -> list[int]:
    return np.asarray(values, dtype=np.float32).view(np.uint32).ravel().tolist()


@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=9),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    )
)
def test_base64_carries_every_float32_bit_for_bit(matrix):
    """NaN payloads, infinities, -0.0 and subnormals included."""
    rows = rows_to_base64(matrix)
    assert len(rows) == matrix.shape[0]
    assert [bits(little_float32(row)) for row in rows] == [bits(row) for row in matrix]
    if matrix.shape[0]:
        assert bits(matrix_from_wire(rows)) == bits(matrix)
        assert bits(vector_from_wire(to_base64(matrix[0]))) == bits(matrix[0])


@given(
    hnp.arrays(
        np.float32,
        st.integers(1, 40),
        elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
    )
)
def test_json_numbers_and_base64_read_back_the_same_bits(vector):
    as_json = json.loads(json.dumps(vector.tolist()))
    assert bits(vector_from_wire(as_json)) == bits(vector_from_wire(to_base64(vector)))


def test_a_string_that_is_not_base64_float32_is_refused():
    with pytest.raises(ValueError, match="not a base64 vector"):
        vector_from_wire("not base64!")
    with pytest.raises(ValueError, match="5 bytes is not float32"):
        vector_from_wire(base64.b64encode(b"12345").decode())


@pytest.mark.engine
def test_base64_vectors_are_the_float_ones_bit_for_bit_online(server):
    floats = pooling(server, {"input": TEXTS, **ALL})["data"]["data"]
    as_b64 = pooling(server, {"input": TEXTS, **ALL, "encoding_format": "base64"})["data"]["data"]
    for f, b in zip(floats, as_b64, strict=True):
        assert isinstance(b["dense_embedding"], str)
        assert bits(little_float32(b["dense_embedding"])) == bits(f["dense_embedding"])
        assert len(b["colbert_vecs"]) == len(f["colbert_vecs"])
        assert [bits(little_float32(row)) for row in b["colbert_vecs"]] == [
            bits(row) for row in f["colbert_vecs"]
        ]
        assert b["sparse_embedding"] == f["sparse_embedding"]  # unchanged


@pytest.mark.engine
def test_base64_answers_are_a_third_of_the_bytes(server):
    def size(encoding: str) -> int:
        data = {"input": TEXTS, **ALL, "encoding_format": encoding}
        resp = post(server, {"model": SERVED_MODEL_NAME, "data": data})
        assert resp.status_code == 200, resp.text
        return len(resp.content)

    assert size("base64") * 3 < size("float")


@pytest.mark.engine
def test_base64_offline_is_the_float_encoding_bit_for_bit(llm):
    def encode(**extra):
        data = {"input": TEXTS[:4], **ALL, **extra}
        (out,) = llm.encode({"data": data}, pooling_task="plugin")
        return out.outputs.data

    for f, b in zip(encode(), encode(encoding_format="base64"), strict=True):
        assert bits(little_float32(b.dense_embedding)) == bits(f.dense_embedding)
        assert [bits(little_float32(r)) for r in b.colbert_vecs] == [
            bits(r) for r in f.colbert_vecs
        ]


@pytest.mark.engine
def test_a_bad_encoding_format_is_a_400_naming_it(server):
    resp = post(
        server,
        {"model": SERVED_MODEL_NAME, "data": {"input": "x", "encoding_format": "float16"}},
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "data.encoding_format"


@pytest.mark.engine
def test_the_client_asks_for_base64_and_gives_the_float_values(server):
    """embed_dense sends encoding_format base64 (seen on the wire) and
    returns the values the float encoding gives; embed's items decode either
    encoding to numpy."""
    sent: list[dict] = []

    def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    floats = pooling(server, {"input": TEXTS, **ALL})["data"]["data"]
    http = httpx.Client(event_hooks={"request": [record]}, timeout=60)
    with SparseEmbeddingClient(server.url, model=SERVED_MODEL_NAME, http_client=http) as client:
        dense = client.embed_dense(TEXTS)
        result = client.embed(TEXTS, **ALL, encoding_format="base64")
    http.close()
    assert sent[0]["data"]["encoding_format"] == "base64"
    assert [bits(v) for v in dense] == [bits(f["dense_embedding"]) for f in floats]
    assert all(type(value) is float for value in dense[0])
    for item, f in zip(result.data, floats, strict=True):
        assert bits(item.dense_array()) == bits(f["dense_embedding"])
        assert item.colbert_array().shape == np.shape(f["colbert_vecs"])
        assert bits(item.colbert_array()) == bits(f["colbert_vecs"])


@pytest.mark.engine
def test_the_async_client_and_an_adapter_read_base64_too(server):
    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    floats = pooling(server, {"input": TEXTS[:3], "return_dense": True})["data"]["data"]
    want = [bits(f["dense_embedding"]) for f in floats]

    async def dense() -> list[list[float]]:
        async with AsyncSparseEmbeddingClient(server.url, model=SERVED_MODEL_NAME) as client:
            return await client.embed_dense(TEXTS[:3])

    assert [bits(v) for v in asyncio.run(dense())] == want
    adapter = BgeM3SparseEmbeddings(server.url, return_dense=True)
    assert [bits(v) for v in adapter.dense_embeddings.embed_documents(TEXTS[:3])] == want
