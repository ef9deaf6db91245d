"""Haystack: BGE-M3 sparse (and dense) embedders, from the plugin's server.

``pip install 'bge-m3-sparse-plugin[haystack]'``. Two components in Haystack's
``@component`` style:

- :class:`BgeM3SparseDocumentEmbedder` fills each ``Document.sparse_embedding``
  (and ``Document.embedding`` with ``return_dense=True``, from the same request);
- :class:`BgeM3SparseTextEmbedder` turns a query into ``sparse_embedding``
  (and ``embedding`` with ``return_dense=True``), for
  ``QdrantSparseEmbeddingRetriever`` or ``QdrantHybridRetriever``;
- :class:`BgeM3Ranker` orders documents by BGE-M3's ``compute_score`` against
  the query, which the server computes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.dataclasses import SparseEmbedding
from haystack.utils import Secret, deserialize_secrets_inplace

from .._config import ADAPTER_BATCH_SIZE, DEFAULT_BASE_URL, DEFAULT_TIMEOUT_S, VLLM_API_KEY_ENV
from ._remote import Remote
from ._rerank import DEFAULT_MODE, check_mode, check_weights, ranked

__all__ = ["BgeM3Ranker", "BgeM3SparseDocumentEmbedder", "BgeM3SparseTextEmbedder"]

# The key of a server started with --api-key, from the variable vLLM itself
# reads; no key when it is unset.
API_KEY_FROM_ENV = Secret.from_env_var(VLLM_API_KEY_ENV, strict=False)


def _key(api_key: Secret | None) -> str | None:
    if isinstance(api_key, str):
        raise TypeError(
            "api_key must be a haystack Secret: Secret.from_env_var('VLLM_API_KEY'), "
            "which a saved pipeline keeps, or Secret.from_token(...), which it refuses to save"
        )
    return api_key.resolve_value() if api_key is not None else None


class _Saved:
    """to_dict and from_dict for a component of ``init_parameters`` and ``api_key``."""

    api_key: Secret | None
    init_parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        # Haystack's own rule: a variable's name is saved, a token refuses to be.
        api_key = self.api_key.to_dict() if self.api_key is not None else None
        return default_to_dict(self, **self.init_parameters, api_key=api_key)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        deserialize_secrets_inplace(data["init_parameters"], keys=["api_key"])
        return default_from_dict(cls, data)


class _Settings(_Saved):
    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        model: str | None = None,
        *,
        return_dense: bool = False,
        batch_size: int = ADAPTER_BATCH_SIZE,
        api_key: Secret | None = API_KEY_FROM_ENV,
        timeout: float = DEFAULT_TIMEOUT_S,
        **request_options: Any,
    ) -> None:
        key = _key(api_key)
        self.api_key = api_key
        self.init_parameters = {
            "base_url": base_url,
            "model": model,
            "return_dense": return_dense,
            "batch_size": batch_size,
            "timeout": timeout,
            **request_options,
        }
        self.return_dense = return_dense
        self.remote = Remote(
            base_url,
            model,
            api_key=key,
            timeout=timeout,
            batch_size=batch_size,
            return_dense=return_dense,
            **request_options,
        )


@component
class BgeM3SparseDocumentEmbedder(_Settings):
    """Fills ``sparse_embedding`` (and ``embedding`` with ``return_dense``) of each document."""

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        return {"documents": self._fill(documents, self.remote.encode(self._texts(documents)))}

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document]) -> dict[str, Any]:
        return {
            "documents": self._fill(documents, await self.remote.aencode(self._texts(documents)))
        }

    @staticmethod
    def _texts(documents: list[Document]) -> list[str]:
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise TypeError("BgeM3SparseDocumentEmbedder expects a list of Documents")
        return [d.content or "" for d in documents]

    def _fill(self, documents: list[Document], vectors: list[Any]) -> list[Document]:
        out = []
        for document, v in zip(documents, vectors, strict=True):
            changes: dict[str, Any] = {
                "sparse_embedding": SparseEmbedding(indices=v.indices, values=v.values)
            }
            if self.return_dense:
                changes["embedding"] = v.dense
            out.append(replace(document, **changes))
        return out


@component
class BgeM3SparseTextEmbedder(_Settings):
    """A query's ``sparse_embedding`` (and ``embedding`` with ``return_dense``)."""

    @component.output_types(sparse_embedding=SparseEmbedding, embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return self._output(self.remote.encode(self._text(text))[0])

    @component.output_types(sparse_embedding=SparseEmbedding, embedding=list[float])
    async def run_async(self, text: str) -> dict[str, Any]:
        return self._output((await self.remote.aencode(self._text(text)))[0])

    @staticmethod
    def _text(text: str) -> list[str]:
        if not isinstance(text, str):
            raise TypeError(
                "BgeM3SparseTextEmbedder expects a string; for documents, use "
                "BgeM3SparseDocumentEmbedder"
            )
        return [text]

    def _output(self, v: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sparse_embedding": SparseEmbedding(indices=v.indices, values=v.values)
        }
        if self.return_dense:
            out["embedding"] = v.dense
        return out


@component
class BgeM3Ranker(_Saved):
    """Orders documents by BGE-M3's ``compute_score`` against the query, best
    first, and keeps ``top_k``; each document's ``score`` becomes its score
    for ``mode`` (``colbert+sparse+dense`` by default)."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        model: str | None = None,
        *,
        mode: str = DEFAULT_MODE,
        weights: list[float] | None = None,
        top_k: int | None = 10,  # as Haystack's own rankers
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        api_key: Secret | None = API_KEY_FROM_ENV,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.mode = check_mode(mode)
        self.weights = check_weights(weights)
        self.top_k = top_k
        self.api_key = api_key
        self.init_parameters = {
            "base_url": base_url,
            "model": model,
            "mode": mode,
            "weights": self.weights,
            "top_k": top_k,
            "max_query_length": max_query_length,
            "max_passage_length": max_passage_length,
            "timeout": timeout,
        }
        self.options = {
            "weights": self.weights,
            "max_query_length": max_query_length,
            "max_passage_length": max_passage_length,
            "modes": [self.mode],  # the one score it ranks by (as _rerank.py)
        }
        self.remote = Remote(base_url, model, api_key=_key(api_key), timeout=timeout)

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, documents: list[Document], top_k: int | None = None
    ) -> dict[str, Any]:
        texts = self._texts(documents)
        scores = self.remote.score(query, texts, **self.options) if texts else []
        return {"documents": self._keep(documents, scores, top_k)}

    @component.output_types(documents=list[Document])
    async def run_async(
        self, query: str, documents: list[Document], top_k: int | None = None
    ) -> dict[str, Any]:
        texts = self._texts(documents)
        scores = await self.remote.ascore(query, texts, **self.options) if texts else []
        return {"documents": self._keep(documents, scores, top_k)}

    @staticmethod
    def _texts(documents: list[Document]) -> list[str]:
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise TypeError("BgeM3Ranker expects a list of Documents")
        return [d.content or "" for d in documents]

    def _keep(
        self, documents: list[Document], scores: list[dict[str, float]], top_k: int | None
    ) -> list[Document]:
        n = self.top_k if top_k is None else top_k
        return [replace(documents[i], score=score) for i, score in ranked(scores, self.mode, n)]
