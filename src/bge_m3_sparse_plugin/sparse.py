"""The sparse arithmetic, as pure functions on numpy arrays.

FlagEmbedding's ``BGEM3FlagModel.encode`` turns per-token weights into
lexical weights with a Python loop over the tokens
(``_process_token_weights``): it drops the cls, eos, pad and unk ids
wherever they are, keeps weights > 0, keeps each id's largest weight, and
orders the ids by their first kept occurrence. These functions compute the
same result without per-token Python work.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["token_weight_span", "lexical_weights"]


def token_weight_span(
    token_ids: np.ndarray, num_weights: int, bos_token_id: int, eos_token_id: int
) -> slice:
    """The positions of ``token_ids`` that vLLM's pooler gave weights for.

    vLLM's ``BOSEOSFilter`` drops the first position when it holds BOS and the
    last when it holds EOS, so the weights line up with the ids between them.
    """
    n = len(token_ids)
    start = 1 if n and int(token_ids[0]) == bos_token_id else 0
    stop = n - 1 if n > start and int(token_ids[-1]) == eos_token_id else n
    if stop - start != num_weights:
        raise ValueError(
            f"the engine returned {num_weights} token weights for a sequence of "
            f"{n} tokens; expected {stop - start} (BOS/EOS removed)"
        )
    return slice(start, stop)


def lexical_weights(
    token_ids: np.ndarray, weights: np.ndarray, skip_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray]:
    """FlagEmbedding's lexical weights of one sequence, as (ids, weights) arrays.

    ``token_ids`` and ``weights`` are aligned 1-D arrays. Returns the unique ids
    in the order of their first kept occurrence and, for each, its largest
    weight. Weights keep their dtype, so fp32 input gives FlagEmbedding's fp32
    values exactly.
    """
    ids = np.asarray(token_ids)
    w = np.asarray(weights)
    if ids.shape != w.shape or ids.ndim != 1:
        raise ValueError(f"token_ids {ids.shape} and weights {w.shape} must be equal 1-D shapes")
    keep = w > 0
    skip = np.fromiter(skip_ids, dtype=ids.dtype if ids.size else np.int64)
    if skip.size:
        keep &= ~np.isin(ids, skip)
    ids, w = ids[keep], w[keep]
    if ids.size == 0:
        return ids, w
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    best = np.full(uniq.shape, -np.inf, dtype=w.dtype)
    np.maximum.at(best, inverse, w)
    order = np.argsort(first, kind="stable")
    return uniq[order], best[order]
