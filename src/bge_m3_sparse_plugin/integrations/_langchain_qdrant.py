"""LangChain's Qdrant store: :class:`BgeM3SparseEmbeddings` (see ``langchain.py``)."""

from __future__ import annotations

from typing import Any

from langchain_qdrant import SparseEmbeddings, SparseVector

from ..client import DEFAULT_BASE_URL
from .langchain import BgeM3DenseEmbeddings
from .remote import Remote

__all__ = ["BgeM3SparseEmbeddings"]


class BgeM3SparseEmbeddings(SparseEmbeddings):
    """``langchain_qdrant.SparseEmbeddings``: each text's ``SparseVector(indices, values)``,
    FlagEmbedding's ``lexical_weights``. ``request_options`` are the typed client's
    (``top_k``, ``min_weight``, ``truncate_prompt_tokens``)."""

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
