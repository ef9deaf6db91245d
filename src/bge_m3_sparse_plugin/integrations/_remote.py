"""A plugin server as the framework adapters use it: texts in, vectors out.

One request brings the sparse vector and, with ``return_dense=True``, the
dense vector of the same forward pass. A framework that asks for the two
halves in two calls (a hybrid store: dense, then sparse, of the same texts)
gets the second half from the first call's request: each half keeps, keyed by
text, what the other half's request brought, and takes it back once.

What is held is bounded and cleared. Vectors are held only for a half that an
adapter has handed to the caller (:meth:`Remote.attach`: LangChain's
``dense_embeddings``, LlamaIndex's ``embed_model``, once asked for), so a
caller of the sparse half alone holds nothing. A half whose call does not find
its texts drops what it held, and at most ``KEPT_TEXTS`` are held per half
(a store may embed a whole insert batch with one half before the other asks).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from .._config import (
    ADAPTER_BATCH_SIZE,
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT_S,
    MAX_INPUTS_ENV,
    max_inputs,
)
from .._exceptions import SparseEmbeddingError
from ..client import AsyncSparseEmbeddingClient, SparseEmbeddingClient

__all__ = ["Remote", "SparseEmbeddingError", "Vectors"]

Half = Literal["sparse", "dense"]
KEPT_TEXTS = 4096  # at most, per half, the oldest dropped first


@dataclass(frozen=True)
class Vectors:
    indices: list[int]
    values: list[float]
    dense: list[float] | None = None


class _Kept:
    """Vectors a request brought for the other half, keyed by text, taken once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_text: OrderedDict[str, Vectors] = OrderedDict()

    def put(self, texts: list[str], vectors: list[Vectors]) -> None:
        with self._lock:
            for text, vector in zip(texts, vectors):
                self._by_text[text] = vector
                self._by_text.move_to_end(text)
            while len(self._by_text) > KEPT_TEXTS:
                self._by_text.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._by_text.clear()

    def __len__(self) -> int:
        return len(self._by_text)

    def take(self, texts: list[str]) -> list[Vectors] | None:
        """All of them, or None (and nothing taken) when one is missing."""
        with self._lock:
            if not texts or any(text not in self._by_text for text in texts):
                return None
            vectors = [self._by_text[text] for text in texts]
            for text in set(texts):
                del self._by_text[text]
            return vectors


class Remote:
    """The plugin's ``/pooling``, in requests of at most ``batch_size`` texts.

    ``request_options`` are the typed client's (``top_k``, ``min_weight``,
    ``truncate_prompt_tokens``...). Sync calls share one client, made on
    first use and closed by :meth:`close`; each async call opens its own and
    closes it before it returns, as an ``httpx.AsyncClient``'s connections
    belong to the event loop that opened them (and a program may run several
    loops, one after the other). ``http_client`` / ``async_http_client`` are
    httpx clients of one's own (proxies, TLS, pools), as the typed client
    takes them: they are used as they are, and never closed here.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        batch_size: int = ADAPTER_BATCH_SIZE,
        return_dense: bool = False,
        http_client: httpx.Client | None = None,
        async_http_client: httpx.AsyncClient | None = None,
        **request_options: Any,
    ) -> None:
        cap = max_inputs()
        if not 1 <= batch_size <= cap:
            raise ValueError(
                f"batch_size must be 1 to {cap} (the plugin's inputs per request, "
                f"{MAX_INPUTS_ENV}), got {batch_size}"
            )
        for name in ("return_sparse", "return_dense", "sparse_format", "encoding_format", "input"):
            if name in request_options:
                raise TypeError(f"{name} is set by the adapter, not a request option")
        self.base_url, self.model, self.api_key, self.timeout = base_url, model, api_key, timeout
        self.batch_size = batch_size
        self.return_dense = return_dense
        self.request_options = request_options
        self._http_clients = (http_client, async_http_client)
        self._sync: SparseEmbeddingClient | None = None
        self._kept: dict[Half, _Kept] = {"sparse": _Kept(), "dense": _Kept()}
        self._attached: set[Half] = set()

    def attach(self, half: Half) -> None:
        """``half`` is in a caller's hands: hold for it what the other half's requests bring."""
        self._attached.add(half)

    def kept(self) -> int:
        """How many vectors are held for a half that has not taken them yet."""
        return sum(map(len, self._kept.values()))

    def _take(self, texts: list[str], half: Half) -> list[Vectors] | None:
        kept = self._kept[half].take(texts)
        if kept is None:
            self._kept[half].clear()  # kept for other texts, which this half did not ask for
        return kept

    def _options(self, half: Half) -> dict[str, Any]:
        return {
            **self.request_options,
            "sparse_format": "indices_values",
            "encoding_format": "base64",  # the dense vector: decoded in _after
            "return_sparse": True,
            "return_dense": self.return_dense or half == "dense",
        }

    def _batches(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _after(self, half: Half, texts: list[str], responses: list[Any]) -> list[Vectors]:
        """The responses' vectors, in order, kept for the other half when it is attached."""
        vectors = [
            Vectors(
                item.sparse_embedding["indices"],
                item.sparse_embedding["values"],
                None if item.dense_embedding is None else item.dense_array().tolist(),
            )
            for response in responses
            for item in response.data
        ]
        other: Half = "dense" if half == "sparse" else "sparse"
        if self.return_dense and other in self._attached:
            self._kept[other].put(texts, vectors)
        return vectors

    def _sync_client(self) -> SparseEmbeddingClient:
        if self._sync is None:
            self._sync = SparseEmbeddingClient(
                self.base_url,
                model=self.model,
                timeout=self.timeout,
                api_key=self.api_key,
                http_client=self._http_clients[0],
            )
        return self._sync

    def encode(self, texts: list[str], half: Half = "sparse") -> list[Vectors]:
        """Vectors for ``texts``, in order, for the ``half`` that asks."""
        kept = self._take(texts, half)
        if kept is not None:
            return kept
        client, options = self._sync_client(), self._options(half)
        responses = [client.embed(batch, **options) for batch in self._batches(texts)]
        return self._after(half, texts, responses)

    async def aencode(self, texts: list[str], half: Half = "sparse") -> list[Vectors]:
        """The asyncio form of :meth:`encode`."""
        kept = self._take(texts, half)
        if kept is not None:
            return kept
        options = self._options(half)
        async with self._async_client() as client:
            responses = [await client.embed(batch, **options) for batch in self._batches(texts)]
        return self._after(half, texts, responses)

    def _async_client(self) -> AsyncSparseEmbeddingClient:
        """A client for one async call (``async with``: closed when it ends)."""
        return AsyncSparseEmbeddingClient(
            self.base_url,
            model=self.model,
            timeout=self.timeout,
            api_key=self.api_key,
            http_client=self._http_clients[1],
        )

    def score(self, query: str, texts: list[str], **options: Any) -> list[dict[str, float]]:
        """The client's ``score``: compute_score's five keys per text."""
        return self._sync_client().score(query, texts, **options)

    async def ascore(self, query: str, texts: list[str], **options: Any) -> list[dict[str, float]]:
        """The asyncio form of :meth:`score`."""
        async with self._async_client() as client:
            return await client.score(query, texts, **options)

    def dense(self, texts: list[str]) -> list[list[float]]:
        return _dense(self.encode(texts, "dense"))

    async def adense(self, texts: list[str]) -> list[list[float]]:
        return _dense(await self.aencode(texts, "dense"))

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None


def _dense(vectors: list[Vectors]) -> list[list[float]]:
    if any(v.dense is None for v in vectors):
        raise SparseEmbeddingError("the server sent no dense vector, though return_dense was asked")
    return [v.dense for v in vectors if v.dense is not None]
