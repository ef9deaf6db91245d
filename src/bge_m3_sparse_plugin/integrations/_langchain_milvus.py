"""LangChain's Milvus store: :class:`BgeM3MilvusSparseEmbeddings` (see ``langchain.py``)."""

from __future__ import annotations

from typing import Any

from langchain_milvus.utils.sparse import BaseSparseEmbedding

from ..client import DEFAULT_BASE_URL
from .langchain import BgeM3DenseEmbeddings
from .remote import Remote

__all__ = ["BgeM3MilvusSparseEmbeddings"]


class BgeM3MilvusSparseEmbeddings(BaseSparseEmbedding):
    """``langchain_milvus``'s sparse embedding: each text's ``{token id: weight}``."""

    def __init__(
        self, base_url: str = DEFAULT_BASE_URL, model: str | None = None, **options: Any
    ) -> None:
        self.remote = Remote(base_url, model, **options)
        self.remote.attach("sparse")
        self._dense = BgeM3DenseEmbeddings(self.remote)

    @property
    def dense_embeddings(self) -> BgeM3DenseEmbeddings:
        """The dense half (a LangChain ``Embeddings``), answered from the sparse
        half's requests with ``return_dense=True``, and they from its."""
        self.remote.attach("dense")
        return self._dense

    def embed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in self.remote.encode(list(texts))]

    def embed_query(self, query: str) -> dict[int, float]:
        return self.embed_documents([query])[0]

    async def aembed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in await self.remote.aencode(list(texts))]

    async def aembed_query(self, query: str) -> dict[int, float]:
        return (await self.aembed_documents([query]))[0]
