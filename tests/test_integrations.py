"""The framework adapters against the real frameworks, a real vLLM server with
the plugin, and real embedded stores (Qdrant in-memory, Milvus Lite).

In each store, a query that is a document's own text must find that document
first; the vectors must be the server's own (compared with the typed client);
and with return_dense, one request per batch must feed both halves of a
hybrid store (requests counted with httpx's event hooks on the wire)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

from .support.corpus import texts

pytestmark = pytest.mark.engine

DOCS = texts(12, seed=7)
QUERIES = DOCS[:5]


class Counter:
    """Counts, on the wire, the /pooling requests a real httpx client sends,
    and how many of them carried each text."""

    def __init__(self) -> None:
        self.requests = 0
        self.sent: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> None:
        if request.url.path == "/pooling":
            self.requests += 1
            for text in json.loads(request.content)["data"]["input"]:
                self.sent[text] = self.sent.get(text, 0) + 1

    def each_sent_once(self, texts: list[str]) -> bool:
        return all(self.sent.get(text) == 1 for text in texts)

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=60, event_hooks={"request": [self]})


@pytest.fixture(scope="module")
def truth(server):
    """The server's answers through the typed client: what every adapter must give."""
    with SparseEmbeddingClient(server.url) as client:
        response = client.embed(DOCS, sparse_format="indices_values", return_dense=True)
    return {
        text: (
            item.sparse_embedding["indices"],
            item.sparse_embedding["values"],
            item.dense_embedding,
        )
        for text, item in zip(DOCS, response.data)
    }


def test_the_texts_are_distinct_and_have_weights(truth):
    assert len(set(DOCS)) == len(DOCS)
    assert all(indices for indices, _, _ in truth.values())


# -- LangChain ---------------------------------------------------------------


def test_langchain_sparse_embeddings_are_the_servers(server, truth):
    from langchain_qdrant import SparseVector

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    sparse = BgeM3SparseEmbeddings(server.url, batch_size=5)  # three requests for 12 texts
    expected = [SparseVector(indices=truth[t][0], values=truth[t][1]) for t in DOCS]
    assert sparse.embed_documents(DOCS) == expected
    assert sparse.embed_query(DOCS[3]) == expected[3]
    assert asyncio.run(sparse.aembed_documents(DOCS)) == expected
    assert asyncio.run(sparse.aembed_query(DOCS[4])) == expected[4]
    assert sparse.dense_embeddings.embed_documents(DOCS[:2]) == [truth[t][2] for t in DOCS[:2]]


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_langchain_qdrant_finds_each_document_by_its_own_text(server, mode):
    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    counter = Counter()
    sparse = BgeM3SparseEmbeddings(
        server.url, return_dense=(mode == "hybrid"), http_client=counter.client()
    )
    store = QdrantVectorStore.from_texts(
        DOCS,
        embedding=sparse.dense_embeddings if mode == "hybrid" else None,
        sparse_embedding=sparse,
        location=":memory:",
        collection_name=f"lc-{mode}",
        retrieval_mode=RetrievalMode.HYBRID if mode == "hybrid" else RetrievalMode.SPARSE,
    )
    # Each document went in one request: in hybrid mode, the dense half's request
    # brought the sparse vectors too. (LangChain also sends one "dummy_text" to
    # learn the dense size.)
    assert counter.each_sent_once(DOCS), counter.sent
    before = counter.requests
    for query in QUERIES:
        hits = store.similarity_search(query, k=3)
        assert hits and hits[0].page_content == query
    assert counter.requests - before == len(QUERIES)  # one request per query, both halves
    hits = asyncio.run(store.asimilarity_search(QUERIES[0], k=1))
    assert [h.page_content for h in hits] == [QUERIES[0]]


def test_langchain_milvus_lite_finds_each_document_by_its_own_text(server, truth, tmp_path):
    from langchain_milvus import Milvus

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3MilvusSparseEmbeddings

    sparse = BgeM3MilvusSparseEmbeddings(server.url)
    assert sparse.embed_documents(DOCS[:3]) == [
        dict(zip(truth[t][0], truth[t][1])) for t in DOCS[:3]
    ]
    assert asyncio.run(sparse.aembed_query(DOCS[1])) == dict(
        zip(truth[DOCS[1]][0], truth[DOCS[1]][1])
    )
    store = Milvus(
        embedding_function=sparse,
        connection_args={"uri": str(tmp_path / "milvus.db")},
        collection_name="lc_sparse",
        auto_id=True,
        index_params={"index_type": "SPARSE_INVERTED_INDEX", "metric_type": "IP"},
        # langchain-milvus's default sparse search params carry drop_ratio_build
        # 0.2, which Milvus Lite refuses ("only drop_ratio_build=0 is supported").
        search_params={"metric_type": "IP", "params": {}},
    )
    store.add_texts(DOCS)
    for query in QUERIES:
        hits = store.similarity_search(query, k=3)
        assert hits and hits[0].page_content == query


# -- LlamaIndex --------------------------------------------------------------


def test_llamaindex_hybrid_qdrant_finds_each_document_by_its_own_text(server, truth):
    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    from bge_m3_sparse_plugin.integrations.llamaindex import BgeM3Sparse

    counter = Counter()
    bge = BgeM3Sparse(server.url, return_dense=True, http_client=counter.client())
    assert bge.sparse_doc_fn(DOCS[:2]) == (
        [truth[t][0] for t in DOCS[:2]],
        [truth[t][1] for t in DOCS[:2]],
    )
    store = QdrantVectorStore(
        "li",
        client=QdrantClient(":memory:"),
        enable_hybrid=True,
        sparse_doc_fn=bge.sparse_doc_fn,
        sparse_query_fn=bge.sparse_query_fn,
    )
    counter.sent.clear()
    index = VectorStoreIndex.from_documents(
        [Document(text=t) for t in DOCS],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=bge.embed_model,
    )
    # Dense and sparse of each document from one request (LlamaIndex embeds in
    # batches of 10, so two requests for 12 documents).
    assert counter.each_sent_once(DOCS), counter.sent
    retriever = index.as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=3, sparse_top_k=3
    )
    for query in QUERIES:
        hits = retriever.retrieve(query)
        assert hits and hits[0].node.get_content() == query
    sparse_only = index.as_retriever(
        vector_store_query_mode="sparse", similarity_top_k=3, sparse_top_k=3
    )
    for query in QUERIES:
        hits = sparse_only.retrieve(query)
        assert hits and hits[0].node.get_content() == query


# -- Haystack ----------------------------------------------------------------


def test_haystack_pipelines_with_qdrant_find_each_document_by_its_own_text(server, truth):
    from haystack import Document, Pipeline
    from haystack.components.writers import DocumentWriter
    from haystack_integrations.components.retrievers.qdrant import (
        QdrantHybridRetriever,
        QdrantSparseEmbeddingRetriever,
    )
    from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

    from bge_m3_sparse_plugin.integrations.haystack import (
        BgeM3SparseDocumentEmbedder,
        BgeM3SparseTextEmbedder,
    )

    dim = len(truth[DOCS[0]][2])
    store = QdrantDocumentStore(
        ":memory:",
        use_sparse_embeddings=True,
        embedding_dim=dim,
        recreate_index=True,
        return_embedding=True,
    )
    indexing = Pipeline()
    indexing.add_component("embedder", BgeM3SparseDocumentEmbedder(server.url, return_dense=True))
    indexing.add_component("writer", DocumentWriter(store))
    indexing.connect("embedder.documents", "writer.documents")
    indexing.run({"embedder": {"documents": [Document(content=t) for t in DOCS]}})
    stored = {d.content: d for d in store.filter_documents()}
    assert set(stored) == set(DOCS)
    for text, document in stored.items():
        # Qdrant keeps a sparse vector's entries sorted by index.
        stored_weights = dict(
            zip(document.sparse_embedding.indices, document.sparse_embedding.values)
        )
        assert stored_weights == pytest.approx(dict(zip(truth[text][0], truth[text][1])), rel=1e-6)
        assert document.embedding == pytest.approx(truth[text][2], rel=1e-5, abs=1e-6)

    sparse_query = Pipeline()
    sparse_query.add_component("embedder", BgeM3SparseTextEmbedder(server.url))
    sparse_query.add_component("retriever", QdrantSparseEmbeddingRetriever(store, top_k=3))
    sparse_query.connect("embedder.sparse_embedding", "retriever.query_sparse_embedding")
    hybrid_query = Pipeline()
    hybrid_query.add_component("embedder", BgeM3SparseTextEmbedder(server.url, return_dense=True))
    hybrid_query.add_component("retriever", QdrantHybridRetriever(store, top_k=3))
    hybrid_query.connect("embedder.sparse_embedding", "retriever.query_sparse_embedding")
    hybrid_query.connect("embedder.embedding", "retriever.query_embedding")
    for query in QUERIES:
        for pipeline in (sparse_query, hybrid_query):
            hits = pipeline.run({"embedder": {"text": query}})["retriever"]["documents"]
            assert hits and hits[0].content == query


def test_haystack_components_serialize_and_run_async(server, truth):
    from haystack import Document

    from bge_m3_sparse_plugin.integrations.haystack import (
        BgeM3SparseDocumentEmbedder,
        BgeM3SparseTextEmbedder,
    )

    embedder = BgeM3SparseTextEmbedder(server.url, top_k=3)
    again = BgeM3SparseTextEmbedder.from_dict(embedder.to_dict())
    out = asyncio.run(again.run_async(DOCS[0]))
    assert len(out["sparse_embedding"].indices) == 3 and "embedding" not in out
    documents = asyncio.run(
        BgeM3SparseDocumentEmbedder(server.url).run_async([Document(content=DOCS[1])])
    )
    assert documents["documents"][0].sparse_embedding.indices == truth[DOCS[1]][0]
    with pytest.raises(TypeError, match="expects a string"):
        embedder.run(["not", "a", "string"])


def test_haystack_pipeline_saved_with_its_key_loads_and_runs(keyed_server, truth, monkeypatch):
    from haystack import Pipeline
    from haystack.utils import Secret

    from bge_m3_sparse_plugin.integrations.haystack import BgeM3SparseTextEmbedder

    from .support.server import API_KEY

    monkeypatch.setenv("VLLM_API_KEY", API_KEY)
    pipeline = Pipeline()
    pipeline.add_component("embedder", BgeM3SparseTextEmbedder(keyed_server.url))
    saved = pipeline.dumps()
    assert "VLLM_API_KEY" in saved and API_KEY not in saved  # the variable's name, never the key
    # Haystack loads only the modules it is told to trust.
    loaded = Pipeline.loads(saved, allowed_modules=["bge_m3_sparse_plugin.integrations.haystack"])
    out = loaded.run({"embedder": {"text": DOCS[0]}})["embedder"]["sparse_embedding"]
    assert out.indices == truth[DOCS[0]][0]
    assert out.values == pytest.approx(truth[DOCS[0]][1], rel=1e-6)
    # A key given as a token is used, and Haystack refuses to save it.
    token = BgeM3SparseTextEmbedder(keyed_server.url, api_key=Secret.from_token(API_KEY))
    assert token.run(DOCS[0])["sparse_embedding"].indices == truth[DOCS[0]][0]
    with pytest.raises(ValueError, match="Cannot serialize token-based secret"):
        token.to_dict()
    with pytest.raises(TypeError, match="api_key must be a haystack Secret"):
        BgeM3SparseTextEmbedder(keyed_server.url, api_key=API_KEY)


def test_the_sparse_half_alone_keeps_nothing(server, truth):
    """return_dense=True, and only the sparse half used (LangChain's sparse
    embeddings, Haystack's document embedder): nothing is held for a dense
    half that nobody took."""
    from haystack import Document

    from bge_m3_sparse_plugin.integrations.haystack import BgeM3SparseDocumentEmbedder
    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    sparse = BgeM3SparseEmbeddings(server.url, return_dense=True, batch_size=4)
    haystack = BgeM3SparseDocumentEmbedder(server.url, return_dense=True, batch_size=4)
    for start in range(0, len(DOCS), 4):
        batch = DOCS[start : start + 4]
        got = sparse.embed_documents(batch)
        assert [v.indices for v in got] == [truth[t][0] for t in batch]
        documents = haystack.run([Document(content=t) for t in batch])["documents"]
        assert [d.embedding for d in documents] == [
            pytest.approx(truth[t][2], rel=1e-5, abs=1e-6) for t in batch
        ]
    assert (sparse.remote.kept(), haystack.remote.kept()) == (0, 0)


# -- dense beside sparse -------------------------------------------------------


def test_embed_dense_is_the_dense_vector_of_pooling(server, truth):
    from bge_m3_sparse_plugin.client import AsyncSparseEmbeddingClient

    with SparseEmbeddingClient(server.url) as client:
        assert client.embed_dense(DOCS[:3]) == [truth[t][2] for t in DOCS[:3]]
        assert client.embed_dense(DOCS[0]) == [truth[DOCS[0]][2]]
        with pytest.raises(TypeError, match="sets return_sparse itself"):
            client.embed_dense(DOCS[0], return_sparse=True)

    async def run() -> list[list[float]]:
        async with AsyncSparseEmbeddingClient(server.url) as client:
            return await client.embed_dense(DOCS[:2])

    assert asyncio.run(run()) == [truth[t][2] for t in DOCS[:2]]


# -- imports ---------------------------------------------------------------------


BLOCK = """
import importlib.abc, sys
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == {blocked!r} or name.startswith({blocked!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, NotInstalled())
"""


def _import_with(blocked: str, statement: str) -> subprocess.CompletedProcess:
    """``statement`` in a fresh interpreter where ``blocked`` is not installed:
    importing it, or anything in it, raises what Python raises for a package
    that is absent."""
    code = BLOCK.format(blocked=blocked) + statement
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "blocked,works,fails",
    [
        ("langchain_milvus", "BgeM3SparseEmbeddings", "BgeM3MilvusSparseEmbeddings"),
        ("langchain_qdrant", "BgeM3MilvusSparseEmbeddings", "BgeM3SparseEmbeddings"),
    ],
)
def test_langchain_needs_only_the_store_in_use(blocked, works, fails):
    module = "bge_m3_sparse_plugin.integrations.langchain"
    ok = _import_with(blocked, f"from {module} import {works}, BgeM3DenseEmbeddings; print('ok')")
    assert (ok.returncode, ok.stdout) == (0, "ok\n"), ok.stderr
    refused = _import_with(blocked, f"from {module} import {fails}")
    assert refused.returncode == 1
    distribution = blocked.replace("_", "-")
    assert refused.stderr.splitlines()[-1] == (
        f"ModuleNotFoundError: {fails} needs {distribution}: pip install '.[langchain]' in "
        "the plugin's checkout (after a release: pip install 'bge-m3-sparse-plugin[langchain]'), "
        f"or pip install {distribution}"
    )
