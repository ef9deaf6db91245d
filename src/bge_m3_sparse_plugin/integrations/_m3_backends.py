"""Where a drop-in's requests go: an engine in this process (the default),
or a running server (``base_url=``). Both take the plugin's own requests:
token ids in (cut as FlagEmbedding cuts them, by the drop-in's tokenizer),
the plugin's items or a score's five keys out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .._exceptions import SparseEmbeddingError
from ..schemas import ScoreResponse, SparseEmbeddingItem, SparseEmbeddingResponse

__all__ = ["Backend", "LocalBackend", "RemoteBackend", "embed_data"]

Wants = tuple[bool, bool, bool]  # dense, sparse, colbert


def embed_data(token_ids: list[list[int]], wants: Wants) -> dict[str, Any]:
    """The plugin's ``data`` for ``encode``: FlagEmbedding's lexical-weight
    dicts; vectors as base64 (decoded by the items' ``dense_array`` and
    ``colbert_array``: float32, as the engine gave them)."""
    dense, sparse, colbert = wants
    return {
        "input": token_ids,
        "return_dense": dense,
        "return_sparse": sparse,
        "return_colbert_vecs": colbert,
        "sparse_format": "lexical_weights",
        "encoding_format": "base64",
    }


class Backend(Protocol):
    def embed(self, token_ids: list[list[int]], wants: Wants) -> list[SparseEmbeddingItem]: ...

    def score(
        self, pairs: Sequence[tuple[str, str]], weights: list[float] | None, cuts: tuple[int, int]
    ) -> list[dict[str, float]]: ...

    def close(self) -> None: ...


class LocalBackend:
    """A ``vllm.LLM`` with the plugin in this process, shared with any other
    drop-in of the same model and settings (``_llm.share``)."""

    def __init__(self, model: str, settings: dict[str, Any]) -> None:
        from .._llm import share

        self._held: Any = share(model, **settings)

    def _run(self, data: dict[str, Any]) -> Any:
        with self._held.lock:
            (out,) = self._held.llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
        return out.outputs

    def embed(self, token_ids: list[list[int]], wants: Wants) -> list[SparseEmbeddingItem]:
        response: SparseEmbeddingResponse = self._run(embed_data(token_ids, wants))
        return response.data

    def score(
        self, pairs: Sequence[tuple[str, str]], weights: list[float] | None, cuts: tuple[int, int]
    ) -> list[dict[str, float]]:
        data: dict[str, Any] = {
            "pairs": [list(pair) for pair in pairs],
            "max_query_length": cuts[0],
            "max_passage_length": cuts[1],
        }
        if weights is not None:
            data["weights"] = list(weights)
        response: ScoreResponse = self._run(data)
        return [item.scores for item in response.data]

    def close(self) -> None:
        from .._llm import release

        held, self._held = self._held, None
        if held is not None:
            release(held)


class RemoteBackend:
    """A running server with the plugin, through the typed client."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        from ..client import SparseEmbeddingClient

        self._client = SparseEmbeddingClient(base_url, api_key=api_key, timeout=timeout)

    def embed(self, token_ids: list[list[int]], wants: Wants) -> list[SparseEmbeddingItem]:
        data = embed_data(token_ids, wants)
        data.pop("input")
        items = self._client.embed(token_ids, **data).data
        if len(items) != len(token_ids):
            raise SparseEmbeddingError(
                f"the server answered {len(items)} items for {len(token_ids)} inputs"
            )
        return list(items)

    def score(
        self, pairs: Sequence[tuple[str, str]], weights: list[float] | None, cuts: tuple[int, int]
    ) -> list[dict[str, float]]:
        return self._client.score_pairs(
            pairs, weights=weights, max_query_length=cuts[0], max_passage_length=cuts[1]
        )

    def close(self) -> None:
        self._client.close()
