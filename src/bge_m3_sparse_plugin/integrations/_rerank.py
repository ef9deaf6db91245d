"""What the three rerankers share: the mode they rank by, its check, and the
order (pure; the scores come from the server, ``Remote.score``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..schemas import SCORE_KEYS

__all__ = ["DEFAULT_MODE", "check_mode", "check_weights", "ranked"]

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
