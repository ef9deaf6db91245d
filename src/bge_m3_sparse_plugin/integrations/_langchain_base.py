"""What LangChain's classes here share: the dense half (a LangChain
``Embeddings``), and :class:`BothHalves`, the base of each store's sparse
class (``_langchain_qdrant.py``, ``_langchain_milvus.py``); ``langchain.py``
exports them all."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from .._config import DEFAULT_BASE_URL
from ._remote import Remote

__all__ = ["BgeM3DenseEmbeddings", "BothHalves"]


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


class BothHalves:
    """The sparse half of a store's pair (the class itself), and its dense half."""

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
