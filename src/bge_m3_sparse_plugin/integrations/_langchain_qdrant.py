"""LangChain's Qdrant store: :class:`BgeM3SparseEmbeddings` (see ``langchain.py``)."""

from __future__ import annotations

from langchain_qdrant import SparseEmbeddings, SparseVector

from ._langchain_base import BothHalves

__all__ = ["BgeM3SparseEmbeddings"]


class BgeM3SparseEmbeddings(BothHalves, SparseEmbeddings):
    """``langchain_qdrant.SparseEmbeddings``: each text's ``SparseVector(indices, values)``,
    FlagEmbedding's ``lexical_weights``. ``request_options`` are the typed client's
    (``top_k``, ``min_weight``, ``truncate_prompt_tokens``)."""

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
