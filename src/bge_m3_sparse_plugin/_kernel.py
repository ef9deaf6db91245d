"""The lexical-weight pass compiled with numba, which vLLM itself depends on.

Imported only by :mod:`bge_m3_sparse_plugin._sparse`, in a background thread
or on demand: compiling takes about a second, and numba keeps the result in
its cache for the next start.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["lexical_weights_pass"]


@numba.njit(cache=True, nogil=True)
def lexical_weights_pass(  # pragma: no cover
    ids: np.ndarray,
    weights: np.ndarray,
    lengths: np.ndarray,
    is_skip: np.ndarray,
    table: np.ndarray,
    kept: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.int64]:
    """FlagEmbedding's lexical weights of concatenated sequences, in one pass.

    ``is_skip[t]`` marks the special ids (ids past its end are not special).
    ``table`` is int32 scratch space with a slot per possible id and
    ``kept`` int32 scratch space for at least ``len(ids)`` positions; their
    contents do not matter. Both are the caller's, so that repeated calls
    reuse memory instead of faulting in fresh pages. Returns the kept ids and
    weights, concatenated, each sequence's bounds, and the first id outside
    ``[0, len(table))`` (then nothing else is computed) or -1.
    """
    m, bad = _kept_positions(ids, weights, is_skip, table.shape[0], kept)
    if bad >= 0:
        return np.empty(0, np.int32), np.empty(0, weights.dtype), np.zeros(0, np.int64), ids[bad]
    out_ids = np.empty(m, np.int32)
    out_w = np.empty(m, weights.dtype)
    bounds = np.zeros(lengths.shape[0] + 1, np.int64)
    n = _merge_repeats(ids, weights, lengths, kept, m, table, out_ids, out_w, bounds)
    return out_ids[:n], out_w[:n], bounds, np.int64(-1)


@numba.njit(cache=True, nogil=True)
def _kept_positions(  # pragma: no cover
    ids: np.ndarray, weights: np.ndarray, is_skip: np.ndarray, n_table: int, kept: np.ndarray
) -> tuple[np.int64, np.int64]:
    """Pass 1: the positions kept (weight > 0, id not special) into ``kept``,
    and how many; or the position of the first id outside ``[0, n_table)``."""
    n_skip = is_skip.shape[0]
    m = np.int64(0)
    # Without a branch on the weight's sign (unpredictable).
    for p in range(ids.shape[0]):
        t = ids[p]
        if t < 0 or t >= n_table:
            return m, np.int64(p)
        kept[m] = p
        m += np.int64(weights[p] > 0) * np.int64(not (t < n_skip and is_skip[t]))
    return m, np.int64(-1)


@numba.njit(cache=True, nogil=True)
def _merge_repeats(  # pragma: no cover
    ids: np.ndarray,
    weights: np.ndarray,
    lengths: np.ndarray,
    kept: np.ndarray,
    m: np.int64,
    table: np.ndarray,
    out_ids: np.ndarray,
    out_w: np.ndarray,
    bounds: np.ndarray,
) -> int:
    """Pass 2: each sequence's kept ids in first-seen order, a repeated id
    keeping its largest weight; fills ``bounds``, returns the entries written.

    ``table[t]`` is where id t was put in the output, if it was put there in
    this sequence, which the output itself confirms (a "sparse set"): the
    table never needs clearing, and stale or garbage slots fail the check.
    """
    n = np.int64(0)
    k = np.int64(0)
    end = np.int64(0)
    for s in range(lengths.shape[0]):
        end += lengths[s]
        first = n
        while k < m and kept[k] < end:
            p = kept[k]
            k += 1
            t = ids[p]
            x = weights[p]
            j = table[t]
            if j >= first and j < n and out_ids[j] == t:
                # max(), not a branch on x > out_w[j]: which is larger is
                # unpredictable, and a mispredicted branch costs more.
                out_w[j] = max(out_w[j], x)
            else:
                table[t] = n
                out_ids[n] = t
                out_w[n] = x
                n += 1
        bounds[s + 1] = n
    return int(n)
