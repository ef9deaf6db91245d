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
from typing import TYPE_CHECKING, Any

from ._formats import weight_dict
from .schemas import SCORE_KEYS, needs_colbert

if TYPE_CHECKING:
    from ._embeddings import ThreeOutputs

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
    """``compute_score``'s five keys from the three scores of one pair, in its
    order; ``weights`` are ``[w_dense, w_sparse, w_colbert]``.

    The combined keys are weighted means, each weight divided by the sum
    first: equal to compute_score's ``(s * w_s + d * w_d) / (w_s + w_d)`` but
    for the last bit, and finite for any weights whose sum is finite (the
    schema refuses the others), where the products could overflow."""
    if weights is not None and len(weights) != 3:
        raise ValueError(f"weights must be [w_dense, w_sparse, w_colbert], got {list(weights)}")
    w_dense, w_sparse, w_colbert = DEFAULT_WEIGHTS if weights is None else weights
    two = w_sparse + w_dense
    three = w_dense + w_sparse + w_colbert
    return {  # in compute_score's order (SCORE_KEYS)
        "colbert": colbert,
        "sparse": sparse,
        "dense": dense,
        "sparse+dense": sparse * (w_sparse / two) + dense * (w_dense / two),
        "colbert+sparse+dense": colbert * (w_colbert / three)
        + sparse * (w_sparse / three)
        + dense * (w_dense / three),
    }


def pair_scores(
    outputs: ThreeOutputs,
    n_queries: int,
    pairs: Sequence[tuple[int, int]],
    weights: Sequence[float] | None = None,
    modes: Sequence[str] | None = None,
) -> list[dict[str, float]]:
    """``compute_score``'s five keys (or those of ``modes``, in its order) for
    each ``(query index, passage index)`` pair, from the request's outputs as
    arrays: the distinct queries first, then the distinct passages (the
    passage index counts from the first passage). Builds no Python object per
    vector value. Where no mode needs ColBERT, ``outputs`` may hold none."""
    keys: tuple[str, ...] = (
        SCORE_KEYS if modes is None else tuple(k for k in SCORE_KEYS if k in modes)
    )
    with_colbert = needs_colbert(keys)
    dense, colbert = outputs.dense, outputs.colbert
    ids, values = outputs.sparse_ids, outputs.sparse_weights
    bounds = outputs.sparse_bounds.tolist()
    scores: list[dict[str, float]] = []
    for q, passage in pairs:
        p = n_queries + passage
        q_part, p_part = slice(bounds[q], bounds[q + 1]), slice(bounds[p], bounds[p + 1])
        five = m3_scores(
            dense_score(dense[q], dense[p]),
            _lexical_score(ids[q_part], values[q_part], ids[p_part], values[p_part]),
            colbert_score(colbert[q], colbert[p]) if with_colbert else 0.0,
            weights,
        )
        scores.append(five if keys == SCORE_KEYS else {k: five[k] for k in keys})
    return scores


def _lexical_score(q_ids: Any, q_w: Any, p_ids: Any, p_w: Any) -> float:
    """:func:`lexical_matching_score` on arrays (each side's ids distinct): the
    products of the shared ids' weights, summed one after the other in the
    query's order in float64, as the Python loop sums them."""
    import numpy as np

    _, in_q, in_p = np.intersect1d(q_ids, p_ids, assume_unique=True, return_indices=True)
    if not in_q.size:
        return 0.0
    order = np.argsort(in_q)
    products = q_w[in_q[order]].astype(np.float64) * p_w[in_p[order]].astype(np.float64)
    return float(np.cumsum(products)[-1])  # cumsum adds in order; sum() pairs them up
