"""LangChain's Milvus store: :class:`BgeM3MilvusSparseEmbeddings` (see ``langchain.py``)."""

from __future__ import annotations

from langchain_milvus.utils.sparse import BaseSparseEmbedding

from ._langchain_base import BothHalves

__all__ = ["BgeM3MilvusSparseEmbeddings"]


class BgeM3MilvusSparseEmbeddings(BothHalves, BaseSparseEmbedding):
    """``langchain_milvus``'s sparse embedding: each text's ``{token id: weight}``."""

    def embed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in self.remote.encode(list(texts))]

    def embed_query(self, query: str) -> dict[int, float]:
        return self.embed_documents([query])[0]

    async def aembed_documents(self, texts: list[str]) -> list[dict[int, float]]:
        return [dict(zip(v.indices, v.values)) for v in await self.remote.aencode(list(texts))]

    async def aembed_query(self, query: str) -> dict[int, float]:
        return (await self.aembed_documents([query]))[0]
