"""What the three rerankers share: the mode they rank by, its check, the
order (pure), and the settings of the two that are pydantic models (the
scores come from the server, ``Remote.score``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, field_validator

from .._config import DEFAULT_BASE_URL, DEFAULT_TIMEOUT_S, VLLM_API_KEY_ENV
from ..schemas import SCORE_KEYS
from ._remote import Remote

__all__ = ["DEFAULT_MODE", "RerankerSettings", "check_mode", "check_weights", "ranked"]

# compute_score's combination of all three, as FlagEmbedding's README ranks.
DEFAULT_MODE = "colbert+sparse+dense"


def check_mode(mode: str) -> str:
    if mode not in SCORE_KEYS:
        raise ValueError(f"mode must be one of {', '.join(SCORE_KEYS)}; got {mode!r}")
    return mode


def check_weights(weights: Sequence[float] | None) -> list[float] | None:
    """``[w_dense, w_sparse, w_colbert]``, as compute_score's weights_for_different_modes."""
    if weights is None:
        return None
    if len(weights) != 3 or any(not isinstance(w, (int, float)) or w < 0 for w in weights):
        raise ValueError(
            f"weights must be [w_dense, w_sparse, w_colbert], each >= 0; got {weights}"
        )
    return [float(w) for w in weights]


def ranked(
    scores: Sequence[dict[str, float]], mode: str, top_n: int | None
) -> list[tuple[int, float]]:
    """``(index, score)`` of the ``top_n`` best (all when None), best first;
    equal scores keep the order they came in."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i][mode])
    return [(i, scores[i][mode]) for i in order[:top_n]]


def _key_from_env() -> SecretStr | None:
    key = os.environ.get(VLLM_API_KEY_ENV)
    return SecretStr(key) if key else None


class RerankerSettings(BaseModel):
    """The fields, checks and server of LangChain's and LlamaIndex's rerankers
    (both pydantic models); each adds its framework's base class and ``top_n``."""

    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    mode: str = DEFAULT_MODE
    weights: list[float] | None = Field(
        default=None, description="[w_dense, w_sparse, w_colbert]; [1, 1, 1] by default"
    )
    max_query_length: int | None = None
    max_passage_length: int | None = None
    # A secret: hidden in repr (SecretStr), and never serialised (model_dump,
    # LlamaIndex's to_json, what a saved pipeline holds); a loaded copy reads
    # it from $VLLM_API_KEY, as Haystack's Secret.from_env_var does.
    api_key: SecretStr | None = Field(default_factory=_key_from_env, exclude=True, repr=False)
    timeout: float = DEFAULT_TIMEOUT_S
    _remote: Remote = PrivateAttr()

    @field_validator("mode")
    @classmethod
    def _mode(cls, mode: str) -> str:
        return check_mode(mode)

    @field_validator("weights")
    @classmethod
    def _weights(cls, weights: list[float] | None) -> list[float] | None:
        return check_weights(weights)

    def model_post_init(self, context: Any) -> None:
        key = self.api_key.get_secret_value() if self.api_key is not None else None
        self._remote = Remote(self.base_url, self.model, api_key=key, timeout=self.timeout)

    def _score_options(self) -> dict[str, Any]:
        return {
            "weights": self.weights,
            "max_query_length": self.max_query_length,
            "max_passage_length": self.max_passage_length,
            # The one score it ranks by: a mode without ColBERT computes none.
            "modes": [self.mode],
        }

    def _scores(self, query: str, texts: list[str]) -> list[dict[str, float]]:
        return self._remote.score(query, texts, **self._score_options())

    async def _ascores(self, query: str, texts: list[str]) -> list[dict[str, float]]:
        return await self._remote.ascore(query, texts, **self._score_options())
