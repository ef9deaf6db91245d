"""BGE-M3's scores of a query against a passage, from the vectors the plugin
returns: FlagEmbedding's definitions (no vLLM, no torch).

- ``lexical_matching_score``: the sparse score, in pure Python, so that the
  client (pydantic and httpx only) has it; numpy is imported by the other
  scores when they run, not by this module;
- ``dense_score``: the inner product of the two normalised CLS vectors;
- ``colbert_score``: each query vector's best inner product with the
  passage's vectors, summed and divided by the number of query vectors
  (``M3Embedder.colbert_score``);
- ``m3_scores``: the five keys of ``BGEM3FlagModel.compute_score``, the two
  combined ones weighted means with ``[w_dense, w_sparse, w_colbert]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._formats import weight_dict
from .schemas import SCORE_KEYS

__all__ = [
    "DEFAULT_WEIGHTS",
    "SCORE_KEYS",
    "colbert_score",
    "dense_score",
    "lexical_matching_score",
    "m3_scores",
    "pair_scores",
]

DEFAULT_WEIGHTS = (1.0, 1.0, 1.0)  # dense, sparse, colbert: compute_score's default


def lexical_matching_score(query: Any, doc: Any) -> float:
    """FlagEmbedding's ``compute_lexical_matching_score`` for one query and one doc.

    The sum over the query's entries, in order, of the query weight times the
    doc's weight for the same id: the same operations in the same order as
    FlagEmbedding, so the same weights give the same number. Either side may be
    in any of the three shapes (``_formats``).
    """
    q, d = weight_dict(query), weight_dict(doc)
    score = 0.0
    for token, weight in q.items():
        if token in d:
            score += weight * d[token]
    return float(score)


def dense_score(query: Any, passage: Any) -> float:
    """The inner product of two dense vectors (normalised: their cosine)."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    p = np.asarray(passage, dtype=np.float32)
    return float(q @ p)


def colbert_score(query: Any, passage: Any) -> float:
    """FlagEmbedding's ``colbert_score``: for each query vector, its largest
    inner product with a passage vector; their sum over the query's vectors,
    divided by how many there are."""
    import numpy as np

    q = np.asarray(query, dtype=np.float32)
    p = np.asarray(passage, dtype=np.float32)
    if q.ndim != 2 or p.ndim != 2 or q.shape[1] != p.shape[1] or not len(q) or not len(p):
        raise ValueError(
            f"ColBERT vectors must be two non-empty (n, d) arrays of one d, got {q.shape} "
            f"and {p.shape}"
        )
    return float((q @ p.T).max(axis=1).sum() / len(q))


def m3_scores(
    dense: float, sparse: float, colbert: float, weights: Sequence[float] | None = None
) -> dict[str, float]:
    """``compute_score``'s five keys from the three scores of one pair;
    ``weights`` are ``[w_dense, w_sparse, w_colbert]``."""
    if weights is not None and len(weights) != 3:
        raise ValueError(f"weights must be [w_dense, w_sparse, w_colbert], got {list(weights)}")
    w_dense, w_sparse, w_colbert = DEFAULT_WEIGHTS if weights is None else weights
    return {
        "dense": dense,
        "sparse": sparse,
        "colbert": colbert,
        "sparse+dense": (sparse * w_sparse + dense * w_dense) / (w_sparse + w_dense),
        "colbert+sparse+dense": (colbert * w_colbert + sparse * w_sparse + dense * w_dense)
        / (w_dense + w_sparse + w_colbert),
    }


def pair_scores(
    queries: Sequence[Any],
    passages: Sequence[Any],
    pairs: Sequence[tuple[int, int]],
    weights: Sequence[float] | None = None,
) -> list[dict[str, float]]:
    """``compute_score``'s five keys for each ``(query index, passage index)``
    pair, from items holding ``dense_embedding``, ``sparse_embedding`` and
    ``colbert_vecs`` (the plugin's response items)."""
    return [
        m3_scores(
            dense_score(queries[q].dense_embedding, passages[p].dense_embedding),
            lexical_matching_score(queries[q], passages[p]),
            colbert_score(queries[q].colbert_vecs, passages[p].colbert_vecs),
            weights,
        )
        for q, p in pairs
    ]
