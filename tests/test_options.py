"""sparse_format, top_k, min_weight and return_colbert_vecs on real servers and a real engine."""

from __future__ import annotations

import numpy as np
import pytest

from .support.parity import ATOL, RTOL, flag_reference
from .support.reference import reference_prune
from .support.requests import pooling, post
from .support.server import SERVED_MODEL_NAME
from .support.texts import LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

TEXTS = [*PARITY_TEXTS.values(), LONG_TEXT]


@pytest.fixture(scope="module")
def full(server) -> list[list[dict]]:
    """Each text's entries with no pruning, as token_weights: the parity suite
    shows they equal FlagEmbedding's."""
    body = pooling(server, {"input": TEXTS, "return_tokens": True})
    return [item["sparse_embedding"] for item in body["data"]["data"]]


def as_pairs(entries: list[dict]) -> list[tuple[int, float]]:
    return [(e["token_id"], e["weight"]) for e in entries]


def test_lexical_weights_format_is_flagembeddings_dict(server, flag_model, full):
    body = pooling(server, {"input": TEXTS, "sparse_format": "lexical_weights"})
    flag = flag_reference(flag_model, TEXTS)
    for i, item in enumerate(body["data"]["data"]):
        got = item["sparse_embedding"]
        assert list(got.items()) == [(str(t), w) for t, w in as_pairs(full[i])]
        # Same keys in the same order as FlagEmbedding's, weights within tolerance.
        assert list(got) == list(flag["lexical_weights"][i])
        np.testing.assert_allclose(
            list(got.values()),
            [float(v) for v in flag["lexical_weights"][i].values()],
            rtol=RTOL,
            atol=ATOL,
        )


def test_indices_values_format(server, full):
    body = pooling(server, {"input": TEXTS, "sparse_format": "indices_values"})
    for i, item in enumerate(body["data"]["data"]):
        pairs = as_pairs(full[i])
        assert item["sparse_embedding"] == {
            "indices": [t for t, _ in pairs],
            "values": [w for _, w in pairs],
        }


@pytest.mark.parametrize(
    "top_k,min_weight", [(1, None), (3, None), (None, "median"), (4, "median"), (10_000, 0.0)]
)
def test_top_k_and_min_weight_prune_as_the_reference_does(server, full, top_k, min_weight):
    if min_weight == "median":
        min_weight = float(np.median([e["weight"] for entries in full for e in entries]))
    data = {"input": TEXTS, "return_tokens": True}
    if top_k is not None:
        data["top_k"] = top_k
    if min_weight is not None:
        data["min_weight"] = min_weight
    body = pooling(server, data)
    items = body["data"]["data"]
    pruned_something = False
    for i, item in enumerate(items):
        want_pairs = reference_prune(as_pairs(full[i]), top_k, min_weight)
        token_of = {e["token_id"]: e["token"] for e in full[i]}
        assert item["sparse_embedding"] == [
            {"token_id": t, "weight": w, "token": token_of[t]} for t, w in want_pairs
        ]
        pruned_something |= len(want_pairs) < len(full[i])
    assert pruned_something or top_k == 10_000


def test_options_combine_with_formats_and_dense(server, full, flag_model):
    body = pooling(
        server,
        {"input": TEXTS, "top_k": 5, "sparse_format": "indices_values", "return_dense": True},
    )
    flag = flag_reference(flag_model, TEXTS)
    for i, item in enumerate(body["data"]["data"]):
        pairs = reference_prune(as_pairs(full[i]), 5, None)
        assert item["sparse_embedding"] == {
            "indices": [t for t, _ in pairs],
            "values": [w for _, w in pairs],
        }
        np.testing.assert_allclose(
            item["dense_embedding"], flag["dense_vecs"][i], rtol=RTOL, atol=ATOL
        )


def test_offline_options_equal_online(llm, server):
    data = {"input": TEXTS, "top_k": 6, "min_weight": 0.01, "sparse_format": "lexical_weights"}
    (out,) = llm.encode({"data": data}, pooling_task="plugin")
    offline = out.outputs.model_dump()
    online = pooling(server, data)["data"]
    assert [item["index"] for item in offline["data"]] == list(range(len(TEXTS)))
    for got, want in zip(offline["data"], online["data"]):
        assert list(got["sparse_embedding"]) == list(want["sparse_embedding"])
        np.testing.assert_allclose(
            list(got["sparse_embedding"].values()),
            list(want["sparse_embedding"].values()),
            rtol=RTOL,
            atol=ATOL,
        )


BAD_OPTIONS = [
    ({"input": "x", "top_k": 0}, "data.top_k"),
    ({"input": "x", "top_k": -3}, "data.top_k"),
    ({"input": "x", "top_k": 1.5}, "data.top_k"),
    ({"input": "x", "min_weight": -0.1}, "data.min_weight"),
    ({"input": "x", "min_weight": "high"}, "data.min_weight"),
    ({"input": "x", "sparse_format": "csr"}, "data.sparse_format"),
    ({"input": "x", "sparse_format": None}, "data.sparse_format"),
    (
        {"input": "x", "return_tokens": True, "sparse_format": "indices_values"},
        "data.return_tokens",
    ),
]


@pytest.mark.parametrize("data,field", BAD_OPTIONS, ids=[str(d) for d, _ in BAD_OPTIONS])
def test_bad_options_are_a_400_naming_the_field(server, data, field):
    resp = post(server, {"model": SERVED_MODEL_NAME, "data": data})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert field in error["message"]
    assert error["param"] == field


# -- ColBERT ----------------------------------------------------------------


def test_colbert_vecs_equal_flagembedding(server, flag_model):
    texts = [*PARITY_TEXTS.values(), LONG_TEXT]
    body = pooling(server, {"input": texts, "return_colbert_vecs": True, "return_sparse": False})
    flag = flag_model.encode(
        texts,
        return_dense=False,
        return_sparse=False,
        return_colbert_vecs=True,
        max_length=1024,
        batch_size=8,
    )
    items = body["data"]["data"]
    assert [item["index"] for item in items] == list(range(len(texts)))
    for i, item in enumerate(items):
        assert set(item) == {"index", "object", "colbert_vecs"}
        want = np.asarray(flag["colbert_vecs"][i])
        got = np.asarray(item["colbert_vecs"])
        # One vector per token but <s>: FlagEmbedding 1.4.2 drops the first
        # (cls) position and keeps </s>.
        n_tokens = len(
            flag_model.tokenizer(texts[i], max_length=1024, truncation=True)["input_ids"]
        )
        assert got.shape == want.shape == (n_tokens - 1, 128), texts[i]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=texts[i])
