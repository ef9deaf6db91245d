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
"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_milvus.utils.sparse import BaseSparseEmbedding
from langchain_qdrant import SparseEmbeddings, SparseVector

from ..client import DEFAULT_BASE_URL
from .remote import Remote

__all__ = ["BgeM3DenseEmbeddings", "BgeM3MilvusSparseEmbeddings", "BgeM3SparseEmbeddings"]


class BgeM3DenseEmbeddings(Embeddings):
    """BGE-M3's dense vectors from the plugin's server (``return_dense`` on ``/pooling``)."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.remote.dense(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self.remote.dense([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self.remote.adense(list(texts))

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.remote.adense([text]))[0]


class BgeM3SparseEmbeddings(SparseEmbeddings):
    """``langchain_qdrant.SparseEmbeddings``: each text's ``SparseVector(indices, values)``,
    FlagEmbedding's ``lexical_weights``. ``request_options`` are the typed client's
    (``top_k``, ``min_weight``, ``truncate_prompt_tokens``)."""

    def __init__(
        self, base_url: str = DEFAULT_BASE_URL, model: str | None = None, **options: Any
    ) -> None:
        self.remote = Remote(base_url, model, **options)
        self.dense_embeddings = BgeM3DenseEmbeddings(self.remote)

    def embed_documents(self, texts: list[str]) -> list[SparseVector]:
        return [
            SparseVector(indices=v.indices, values=v.values)
            for v in self.remote.encode(list(texts))
        ]

    def embed_query(self, text: str) -> SparseVector:
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[SparseVector]:
        vectors = await self.remote.aencode(list(texts))
        return [SparseVector(indices=v.indices, values=v.values) for v in vectors]

    async def aembed_query(self, text: str) -> SparseVector:
        return (await self.aembed_documents([text]))[0]


class BgeM3MilvusSparseEmbeddings(BaseSparseEmbedding):
    """``langchain_milvus``'s sparse embedding: each text's ``{token id: weight}``."""

    def __init__(
        self, base_url: str = DEFAULT_BASE_URL, model: str | None = None, **options: Any
    ) -> None:
        self.remote = Remote(base_url, model, **options)
        self.dense_embeddings = BgeM3DenseEmbeddings(self.remote)

    def embed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in self.remote.encode(list(texts))]

    def embed_query(self, query: str) -> dict[int, float]:
        return self.embed_documents([query])[0]

    async def aembed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in await self.remote.aencode(list(texts))]

    async def aembed_query(self, query: str) -> dict[int, float]:
        return (await self.aembed_documents([query]))[0]
