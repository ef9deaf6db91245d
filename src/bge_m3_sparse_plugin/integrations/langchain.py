"""LangChain: BGE-M3 sparse embeddings for ``langchain-qdrant`` and ``langchain-milvus``.

``pip install 'bge-m3-sparse-plugin[langchain]'``. Each class talks to a vLLM
server running the plugin::

    from langchain_qdrant import QdrantVectorStore, RetrievalMode
    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    sparse = BgeM3SparseEmbeddings("http://127.0.0.1:8000", return_dense=True)
    store = QdrantVectorStore.from_texts(texts, embedding=sparse.dense_embeddings,
                                         sparse_embedding=sparse, location=":memory:",
                                         retrieval_mode=RetrievalMode.HYBRID)

With ``return_dense=True`` one request per batch brings both vectors:
``dense_embeddings`` (a LangChain ``Embeddings``) answers from it.

:class:`BgeM3Reranker` is a ``BaseDocumentCompressor`` (for
``ContextualCompressionRetriever``) that orders documents by BGE-M3's
``compute_score``, which the server computes.

Each store's base class is imported only when its class is asked for: a user
with langchain-qdrant alone imports :class:`BgeM3SparseEmbeddings` without
langchain-milvus, and the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict

from .._config import install_hint
from .._missing import is_missing
from ._langchain_base import BgeM3DenseEmbeddings
from ._rerank import RerankerSettings, ranked

if TYPE_CHECKING:
    from ._langchain_milvus import BgeM3MilvusSparseEmbeddings
    from ._langchain_qdrant import BgeM3SparseEmbeddings

__all__ = [
    "BgeM3DenseEmbeddings",
    "BgeM3MilvusSparseEmbeddings",
    "BgeM3Reranker",
    "BgeM3SparseEmbeddings",
]

# Each store's class, the module that holds it, and the package it needs.
_BY_STORE = {
    "BgeM3SparseEmbeddings": ("._langchain_qdrant", "langchain_qdrant", "langchain-qdrant"),
    "BgeM3MilvusSparseEmbeddings": ("._langchain_milvus", "langchain_milvus", "langchain-milvus"),
}


class BgeM3Reranker(RerankerSettings, BaseDocumentCompressor):
    """Orders documents by BGE-M3's ``compute_score`` against the query, best
    first, and keeps ``top_n`` (all when None); each kept document's metadata
    gets ``relevance_score``, its score for ``mode``. The server scores: one
    request per ``ADAPTER_BATCH_SIZE`` documents."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    top_n: int | None = 3  # LangChain's rerankers keep 3 by default

    def _keep(
        self, documents: Sequence[Document], scores: list[dict[str, float]]
    ) -> list[Document]:
        return [
            Document(
                page_content=documents[i].page_content,
                metadata={**documents[i].metadata, "relevance_score": score},
                id=documents[i].id,
            )
            for i, score in ranked(scores, self.mode, self.top_n)
        ]

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        texts = [d.page_content for d in documents]
        return self._keep(documents, self._scores(query, texts))

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        texts = [d.page_content for d in documents]
        return self._keep(documents, await self._ascores(query, texts))


def __getattr__(name: str) -> Any:
    if name not in _BY_STORE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, package, distribution = _BY_STORE[name]
    import importlib

    try:
        found = importlib.import_module(module, __package__)
    except ImportError as exc:
        if not is_missing(exc, package):
            raise
        raise ModuleNotFoundError(
            f"{name} needs {distribution}: {install_hint('langchain')}, "
            f"or pip install {distribution}",
            name=package,
        ) from exc
    return getattr(found, name)
