"""The typed clients' score(): FlagEmbedding's compute_score for one query
against a list of documents, on a real server, against real FlagEmbedding."""

from __future__ import annotations

import asyncio

import pytest

from bge_m3_sparse_plugin.client import (
    AsyncSparseEmbeddingClient,
    SparseEmbeddingClient,
    SparseEmbeddingError,
)

from .support.parity import assert_scores_equal
from .support.parity import flag_scores as flag_pairs
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

DOCS = [t for k, t in PARITY_TEXTS.items() if k not in EMPTY_BY_DESIGN] + [LONG_TEXT]
QUERIES = [
    "I love China",
    "sparse and dense score",
    "hi, bge-m3",
    LONG_TEXT,
]  # the last: cut at 512


def flag_scores(flag_model, query, docs, weights=None, max_query_length=512) -> list[dict]:
    return flag_pairs(flag_model, [(query, d) for d in docs], weights, max_query_length)


@pytest.mark.parametrize("weights", [None, [0.4, 0.2, 0.4]])
def test_score_equals_compute_score_on_every_key(server, flag_model, weights):
    with SparseEmbeddingClient(server.url) as client:
        for query in QUERIES:
            got = client.score(query, DOCS, weights=weights)
            assert_scores_equal(got, flag_scores(flag_model, query, DOCS, weights), query[:40])


def test_the_async_twin_gives_the_same_and_short_queries_are_cut_as_flagembedding(
    server, flag_model
):
    async def run():
        async with AsyncSparseEmbeddingClient(server.url) as client:
            return await client.score(LONG_TEXT, DOCS[:3], max_query_length=16)

    got = asyncio.run(run())
    assert_scores_equal(
        got, flag_scores(flag_model, LONG_TEXT, DOCS[:3], max_query_length=16), "async"
    )


def test_more_documents_than_one_request_keep_their_order(server):
    docs = [f"{w} river sky language" for w in ("a", "b", "c", "d", "e")] * 30  # 150: 3 requests
    with SparseEmbeddingClient(server.url) as client:
        many = client.score("river sky", docs)
        each = client.score("river sky", docs[:5])
    assert len(many) == 150
    for i, scores in enumerate(many):
        assert scores == pytest.approx(each[i % 5], rel=1e-5, abs=1e-6), i


@pytest.mark.parametrize(
    "args,kwargs,param",
    [
        ((None, ["x"]), {}, "data.query"),
        (("q", "a text, not a list"), {}, "data.documents"),
        (("q", ["x", 7]), {}, "data.documents[1]"),
        (("q", ["x"]), {"weights": [1, 1]}, "data.weights[2]"),
        (("q", ["x"]), {"max_query_length": 0}, "data.max_query_length"),
        (("q", ["x"]), {"max_passage_length": "8"}, "data.max_passage_length"),
    ],
)
def test_bad_arguments_name_their_parameter_before_any_request(args, kwargs, param):
    # No server at this address: the check comes before any request.
    with (
        SparseEmbeddingClient("http://127.0.0.1:9") as client,
        pytest.raises(SparseEmbeddingError) as info,
    ):
        client.score(*args, **kwargs)
    assert info.value.param == param


def test_no_documents_no_scores(server):
    with SparseEmbeddingClient(server.url) as client:
        assert client.score("q", []) == []
