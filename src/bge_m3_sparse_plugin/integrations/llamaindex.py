"""LlamaIndex: BGE-M3 sparse vectors for ``QdrantVectorStore(enable_hybrid=True)``.

``pip install 'bge-m3-sparse-plugin[llamaindex]'``::

    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from bge_m3_sparse_plugin.integrations.llamaindex import BgeM3Sparse

    bge = BgeM3Sparse("http://127.0.0.1:8000", return_dense=True)
    store = QdrantVectorStore("docs", client=client, enable_hybrid=True,
                              sparse_doc_fn=bge.sparse_doc_fn, sparse_query_fn=bge.sparse_query_fn)
    index = VectorStoreIndex.from_documents(documents, storage_context=...,
                                            embed_model=bge.embed_model)

``sparse_doc_fn`` and ``sparse_query_fn`` take a list of texts and return
``(indices, values)``, as LlamaIndex's Qdrant store wants. ``embed_model`` is a
LlamaIndex embedding of BGE-M3's dense vectors; with ``return_dense=True`` the
dense vectors of the documents come in the same requests as their sparse ones.

:class:`BgeM3Rerank` is a node postprocessor that orders the retrieved nodes
by BGE-M3's ``compute_score``, which the server computes::

    engine = index.as_query_engine(similarity_top_k=10,
                                   node_postprocessors=[BgeM3Rerank(top_n=3)])
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from pydantic import PrivateAttr

from .._config import DEFAULT_BASE_URL
from ._remote import Remote
from ._rerank import RerankerSettings, ranked

__all__ = ["BgeM3DenseEmbedding", "BgeM3Rerank", "BgeM3Sparse"]

BatchSparseEncoding = tuple[list[list[int]], list[list[float]]]


class BgeM3DenseEmbedding(BaseEmbedding):
    """BGE-M3's dense vectors from the plugin's server, as a LlamaIndex embedding."""

    _remote: Remote = PrivateAttr()

    def __init__(self, remote: Remote, **kwargs: Any) -> None:
        super().__init__(model_name=remote.model or "bge-m3", **kwargs)
        self._remote = remote

    @classmethod
    def class_name(cls) -> str:
        return "BgeM3DenseEmbedding"

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._remote.dense([query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._remote.adense([query]))[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._remote.dense([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._remote.dense(texts)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await self._remote.adense(texts)


class BgeM3Sparse:
    """The ``sparse_doc_fn`` / ``sparse_query_fn`` pair, and ``embed_model`` for the dense half."""

    def __init__(
        self, base_url: str = DEFAULT_BASE_URL, model: str | None = None, **options: Any
    ) -> None:
        self.remote = Remote(base_url, model, **options)
        self.remote.attach("sparse")
        self._dense = BgeM3DenseEmbedding(self.remote)

    @property
    def embed_model(self) -> BgeM3DenseEmbedding:
        """The dense half, a LlamaIndex embedding, answered from the sparse
        half's requests with ``return_dense=True``, and they from its."""
        self.remote.attach("dense")
        return self._dense

    def sparse_doc_fn(self, texts: list[str]) -> BatchSparseEncoding:
        vectors = self.remote.encode(list(texts))
        return [v.indices for v in vectors], [v.values for v in vectors]

    def sparse_query_fn(self, texts: list[str]) -> BatchSparseEncoding:
        return self.sparse_doc_fn(texts)


class BgeM3Rerank(RerankerSettings, BaseNodePostprocessor):
    """Orders nodes by BGE-M3's ``compute_score`` against the query, best
    first, and keeps ``top_n``; each node's ``score`` becomes its score for
    ``mode``. The nodes' text is what they were embedded with
    (``MetadataMode.EMBED``), as LlamaIndex's own rerankers take it."""

    top_n: int | None = 2  # LlamaIndex's rerankers keep 2 by default

    @classmethod
    def class_name(cls) -> str:
        return "BgeM3Rerank"

    @staticmethod
    def _query_and_texts(
        nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> tuple[str, list[str]]:
        if query_bundle is None:
            raise ValueError("BgeM3Rerank needs the query: pass query_bundle or query_str")
        return query_bundle.query_str, [
            n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes
        ]

    def _keep(
        self, nodes: list[NodeWithScore], scores: list[dict[str, float]]
    ) -> list[NodeWithScore]:
        # New NodeWithScore objects: the caller's keep their retrieval scores.
        return [
            NodeWithScore(node=nodes[i].node, score=score)
            for i, score in ranked(scores, self.mode, self.top_n)
        ]

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, texts = self._query_and_texts(nodes, query_bundle)
        if not nodes:
            return []
        return self._keep(nodes, self._scores(query, texts))

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, texts = self._query_and_texts(nodes, query_bundle)
        if not nodes:
            return []
        return self._keep(nodes, await self._ascores(query, texts))
