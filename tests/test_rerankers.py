"""The rerankers in LangChain, LlamaIndex and Haystack, against the real
frameworks, a real vLLM server with the plugin, a real embedded store
(Qdrant in memory) for the candidates, and real FlagEmbedding: each keeps the
candidates that FlagEmbedding's compute_score ranks best, in its order, with
its scores."""

from __future__ import annotations

import asyncio

import pytest

from .support.corpus import texts
from .support.parity import ATOL, RTOL, flag_scores

pytestmark = pytest.mark.engine

DOCS = texts(16, seed=21)
# Queries that are no document's text: a few words of one, and mixed words.
QUERIES = [
    " ".join(DOCS[3].split()[:6]),
    "river sky language retrieval",
    " ".join(DOCS[9].split()[4:12]),
    "dense embedding of a document about the sun",
]
CANDIDATES = 8  # what the store retrieves, before the reranker


def flag_ranking(flag_model, query: str, candidates: list[str], mode: str, weights=None):
    """The candidates best first by compute_score's ``mode``, with the scores."""
    scores = flag_scores(flag_model, [(query, c) for c in candidates], weights)
    order = sorted(range(len(candidates)), key=lambda i: -scores[i][mode])
    return [candidates[i] for i in order], [scores[i][mode] for i in order]


def assert_ranked_as_flag(got_texts, got_scores, want_texts, want_scores, label):
    assert got_texts == want_texts[: len(got_texts)], label
    assert got_scores == pytest.approx(want_scores[: len(got_texts)], rel=RTOL, abs=ATOL), label


@pytest.fixture(scope="module")
def qdrant_langchain(server):
    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    return QdrantVectorStore.from_texts(
        DOCS,
        sparse_embedding=BgeM3SparseEmbeddings(server.url),
        location=":memory:",
        collection_name="rerank",
        retrieval_mode=RetrievalMode.SPARSE,
    )


@pytest.mark.parametrize(
    "mode,weights,top_n",
    [
        ("colbert+sparse+dense", None, 3),
        ("sparse+dense", [0.3, 0.7, 0.0], 5),
        ("colbert", None, None),
    ],
)
def test_langchain_reranker_in_a_compression_retriever(
    server, flag_model, qdrant_langchain, mode, weights, top_n
):
    from langchain_classic.retrievers import ContextualCompressionRetriever

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3Reranker

    base = qdrant_langchain.as_retriever(search_kwargs={"k": CANDIDATES})
    reranker = BgeM3Reranker(base_url=server.url, mode=mode, weights=weights, top_n=top_n)
    retriever = ContextualCompressionRetriever(base_compressor=reranker, base_retriever=base)
    for query in QUERIES:
        candidates = [d.page_content for d in base.invoke(query)]
        assert len(candidates) > 5  # sparse search finds those that share a token
        want_texts, want_scores = flag_ranking(flag_model, query, candidates, mode, weights)
        got = retriever.invoke(query)
        assert len(got) == min(top_n or CANDIDATES, len(candidates))
        assert_ranked_as_flag(
            [d.page_content for d in got],
            [d.metadata["relevance_score"] for d in got],
            want_texts,
            want_scores,
            query,
        )
    got_async = asyncio.run(retriever.ainvoke(QUERIES[0]))
    assert [d.page_content for d in got_async] == [
        d.page_content for d in retriever.invoke(QUERIES[0])
    ]


def test_llamaindex_reranker_as_a_node_postprocessor(server, flag_model):
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers.no_text import NoText
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    from bge_m3_sparse_plugin.integrations.llamaindex import BgeM3Rerank, BgeM3Sparse

    bge = BgeM3Sparse(server.url, return_dense=True)
    store = QdrantVectorStore(
        "rerank",
        client=QdrantClient(":memory:"),
        enable_hybrid=True,
        sparse_doc_fn=bge.sparse_doc_fn,
        sparse_query_fn=bge.sparse_query_fn,
    )
    index = VectorStoreIndex.from_documents(
        [Document(text=t) for t in DOCS],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=bge.embed_model,
    )
    base = index.as_retriever(vector_store_query_mode="sparse", sparse_top_k=CANDIDATES)
    rerank = BgeM3Rerank(base_url=server.url, top_n=3)
    # A query engine as users build one; "no_text" returns the nodes, no LLM answer.
    # (NoText built here: get_response_synthesizer's "no_text" asks Settings for
    # an LLM, OpenAI's by default, whatever llm it is given.)
    engine = RetrieverQueryEngine(
        base, response_synthesizer=NoText(llm=MockLLM()), node_postprocessors=[rerank]
    )
    for query in QUERIES:
        retrieved = base.retrieve(query)
        candidates = [n.node.get_content() for n in retrieved]
        assert len(candidates) > 5
        want_texts, want_scores = flag_ranking(
            flag_model, query, candidates, "colbert+sparse+dense"
        )
        got = rerank.postprocess_nodes(retrieved, query_str=query)
        assert_ranked_as_flag(
            [n.node.get_content() for n in got],
            [n.score for n in got],
            want_texts,
            want_scores,
            query,
        )
        # The caller's nodes keep their retrieval scores.
        assert [n.score for n in retrieved] == [n.score for n in base.retrieve(query)]
    # In the query engine, and on the async path.
    query = QUERIES[1]
    want = [
        n.node.get_content()
        for n in rerank.postprocess_nodes(base.retrieve(query), query_str=query)
    ]
    assert [n.node.get_content() for n in engine.query(query).source_nodes] == want
    got = asyncio.run(rerank.apostprocess_nodes(base.retrieve(query), query_str=query))
    assert [n.node.get_content() for n in got] == want
    with pytest.raises(ValueError, match="needs the query"):
        rerank.postprocess_nodes(base.retrieve(query))


def test_haystack_ranker_in_a_pipeline_saved_and_loaded(server, flag_model):
    from haystack import Document, Pipeline
    from haystack.components.writers import DocumentWriter
    from haystack_integrations.components.retrievers.qdrant import QdrantSparseEmbeddingRetriever
    from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

    from bge_m3_sparse_plugin.client import SparseEmbeddingClient
    from bge_m3_sparse_plugin.integrations.haystack import (
        BgeM3Ranker,
        BgeM3SparseDocumentEmbedder,
        BgeM3SparseTextEmbedder,
    )

    with SparseEmbeddingClient(server.url) as client:
        dim = len(client.embed_dense("x")[0])
    store = QdrantDocumentStore(
        ":memory:", use_sparse_embeddings=True, embedding_dim=dim, recreate_index=True
    )
    indexing = Pipeline()
    indexing.add_component("embedder", BgeM3SparseDocumentEmbedder(server.url, return_dense=True))
    indexing.add_component("writer", DocumentWriter(store))
    indexing.connect("embedder.documents", "writer.documents")
    indexing.run({"embedder": {"documents": [Document(content=t) for t in DOCS]}})

    search = Pipeline()
    search.add_component("embedder", BgeM3SparseTextEmbedder(server.url))
    search.add_component("retriever", QdrantSparseEmbeddingRetriever(store, top_k=CANDIDATES))
    search.add_component("ranker", BgeM3Ranker(server.url, mode="sparse+dense", top_k=4))
    search.connect("embedder.sparse_embedding", "retriever.query_sparse_embedding")
    search.connect("retriever.documents", "ranker.documents")
    for query in QUERIES:
        out = search.run(
            {"embedder": {"text": query}, "ranker": {"query": query}},
            include_outputs_from={"retriever"},
        )
        candidates = [d.content for d in out["retriever"]["documents"]]
        assert len(candidates) > 5
        want_texts, want_scores = flag_ranking(flag_model, query, candidates, "sparse+dense")
        got = out["ranker"]["documents"]
        assert len(got) == 4
        assert_ranked_as_flag(
            [d.content for d in got], [d.score for d in got], want_texts, want_scores, query
        )

    ranker = BgeM3Ranker(server.url, mode="dense", weights=[1, 0, 0], top_k=2, max_query_length=8)
    saved = ranker.to_dict()
    assert saved["init_parameters"]["mode"] == "dense"
    again = BgeM3Ranker.from_dict(saved)
    candidates = [Document(content=t) for t in DOCS[:6]]
    got = asyncio.run(again.run_async(QUERIES[2], candidates, top_k=3))["documents"]
    scores = flag_scores(flag_model, [(QUERIES[2], d) for d in DOCS[:6]], max_query_length=8)
    order = sorted(range(6), key=lambda i: -scores[i]["dense"])[:3]
    assert [d.content for d in got] == [DOCS[i] for i in order]
    assert ranker.run(QUERIES[2], [])["documents"] == []


@pytest.mark.parametrize(
    "make",
    [
        "bge_m3_sparse_plugin.integrations.langchain:BgeM3Reranker",
        "bge_m3_sparse_plugin.integrations.llamaindex:BgeM3Rerank",
        "bge_m3_sparse_plugin.integrations.haystack:BgeM3Ranker",
    ],
)
def test_a_mode_or_weights_that_compute_score_lacks_is_refused_by_name(make):
    import importlib

    module, name = make.split(":")
    cls = getattr(importlib.import_module(module), name)
    with pytest.raises(ValueError, match="mode must be one of colbert, sparse, dense"):
        cls(mode="colbert+dense")
    with pytest.raises(ValueError, match=r"weights must be \[w_dense, w_sparse, w_colbert\]"):
        cls(weights=[1, 1])
