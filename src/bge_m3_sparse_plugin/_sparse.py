"""The sparse arithmetic, as pure functions on numpy arrays.

FlagEmbedding's ``BGEM3FlagModel.encode`` turns per-token weights into
lexical weights with a Python loop over the tokens
(``_process_token_weights``): it drops the cls, eos, pad and unk ids
wherever they are, keeps weights > 0, keeps each id's largest weight, and
orders the ids by their first kept occurrence. These functions compute the
same result without per-token Python work.

:func:`lexical_weights_flat` runs a single pass compiled with numba once
:func:`start_compiling` has made it ready (numba comes with vLLM), and a chain
of whole-batch numpy calls until then or without numba. Both give the same
result; the tests compare each with FlagEmbedding's loop.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "compiled_ready",
    "lexical_weights",
    "lexical_weights_batch",
    "lexical_weights_flat",
    "lexical_weights_flat_compiled",
    "lexical_weights_flat_numpy",
    "prune",
    "prune_flat",
    "split_pooled_outputs",
    "start_compiling",
]

logger = logging.getLogger("vllm.plugins." + __name__)

# The compiled pass, set once it is compiled (or loaded from numba's cache).
# ids, weights, lengths, is_skip, table, kept -> kept ids, weights, bounds, bad id.
_Pass = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.int64]]
_compiled: _Pass | None = None
_compile_lock = threading.Lock()
_compile_thread: threading.Thread | None = None


def lexical_weights(
    token_ids: np.ndarray, weights: np.ndarray, skip_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray]:
    """FlagEmbedding's lexical weights of one sequence, as (ids, weights) arrays.

    ``token_ids`` and ``weights`` are aligned 1-D arrays. Returns the unique ids
    in the order of their first kept occurrence and, for each, its largest
    weight. Weights keep their dtype, so fp32 input gives FlagEmbedding's fp32
    values exactly.
    """
    return lexical_weights_batch([token_ids], [weights], skip_ids)[0]


def lexical_weights_batch(
    token_ids: Sequence[np.ndarray], weights: Sequence[np.ndarray], skip_ids: Iterable[int]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`lexical_weights` of many sequences, computed in one pass."""
    if len(token_ids) != len(weights):
        raise ValueError(f"{len(token_ids)} id sequences but {len(weights)} weight sequences")
    n_seq = len(token_ids)
    if n_seq == 0:
        return []
    lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=n_seq)
    if not np.array_equal(lengths, np.fromiter(map(len, weights), dtype=np.int64, count=n_seq)):
        raise ValueError("each sequence needs as many weights as token ids")
    ids, w = np.concatenate(token_ids), np.concatenate(weights)
    if ids.ndim != 1 or w.ndim != 1:
        raise ValueError("token_ids and weights must be sequences of 1-D arrays")
    out_ids, out_w, bounds = lexical_weights_flat(ids, w, lengths, skip_ids)
    edges = bounds.tolist()
    return [(out_ids[a:b], out_w[a:b]) for a, b in itertools.pairwise(edges)]


def lexical_weights_flat(
    ids: np.ndarray, weights: np.ndarray, lengths: np.ndarray, skip_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch computation on concatenated sequences.

    ``ids`` and ``weights`` hold the sequences one after another, ``lengths``
    their lengths. Returns the kept ids (int32) and weights, concatenated in
    the same way, and ``bounds``: sequence ``i``'s entries are
    ``[bounds[i]:bounds[i+1]]``.
    """
    if _compiled is not None and np.asarray(weights).dtype == np.float32:
        return lexical_weights_flat_compiled(ids, weights, lengths, skip_ids)
    return lexical_weights_flat_numpy(ids, weights, lengths, skip_ids)


def lexical_weights_flat_compiled(
    ids: np.ndarray, weights: np.ndarray, lengths: np.ndarray, skip_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`lexical_weights_flat` as one compiled pass over the tokens.

    Compiles on first use if :func:`start_compiling` has not done it.
    """
    kernel = _compiled or _compile()
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    weights = np.ascontiguousarray(weights)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    skip = np.fromiter(skip_ids, dtype=np.int64)
    is_skip = np.zeros(int(skip.max()) + 1 if skip.size else 0, dtype=np.bool_)
    is_skip[skip] = True
    table, kept = _workspace.take(ids.size)
    out_ids, out_w, bounds, bad = kernel(ids, weights, lengths, is_skip, table, kept)
    # No bounds: the pass stopped at an id outside the table.
    if bounds.size == 0 and bad >= 0:  # grow the table to the largest id, once, and redo
        table = _workspace.grow_table(int(ids.max()) + 1)
        out_ids, out_w, bounds, bad = kernel(ids, weights, lengths, is_skip, table, kept)
    if bounds.size == 0:
        raise ValueError(f"token ids must be >= 0, got {int(bad)}")
    return out_ids, out_w, bounds


class _Workspace(threading.local):
    """Scratch memory for the compiled pass, one per thread, reused across calls:
    fresh multi-megabyte arrays on every call cost more in page faults than the
    pass itself. Their contents never matter."""

    MAX_KEPT = 1 << 22  # positions kept between calls (16 MiB); larger calls get their own

    def __init__(self) -> None:
        self.table = np.empty(0, dtype=np.int32)
        self.kept = np.empty(0, dtype=np.int32)

    def take(self, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        kept = self.kept
        if kept.size < n_tokens:
            kept = np.empty(n_tokens, dtype=np.int32)
            if n_tokens <= self.MAX_KEPT:
                self.kept = kept
        return self.table, kept

    def grow_table(self, n_ids: int) -> np.ndarray:
        if self.table.size < n_ids:
            self.table = np.empty(max(n_ids, 1 << 18), dtype=np.int32)
        return self.table


_workspace = _Workspace()


def compiled_ready() -> bool:
    """Whether :func:`lexical_weights_flat` runs the compiled pass."""
    return _compiled is not None


def _compile() -> _Pass:
    global _compiled  # noqa: PLW0603 -- compiled once per process, read by the dispatcher
    with _compile_lock:
        if _compiled is None:
            from ._kernel import lexical_weights_pass

            # Compile for the types the processor passes, on a tiny input.
            lexical_weights_pass(
                np.array([0, 5], np.int64),
                np.array([0.5, 0.5], np.float32),
                np.array([2], np.int64),
                np.ones(1, np.bool_),
                np.zeros(6, np.int32),
                np.empty(2, np.int32),
            )
            _compiled = lexical_weights_pass
    return _compiled


def start_compiling() -> None:
    """Compile the single pass in a background thread; until it is ready,
    and if numba is missing, the numpy path serves."""
    global _compile_thread  # noqa: PLW0603 -- at most one compiling thread per process

    def run() -> None:
        started = time.perf_counter()
        try:
            _compile()
        except Exception:  # numba missing or broken: the numpy path is complete
            logger.warning(
                "bge_m3_sparse_plugin: the compiled lexical-weight pass is not available; "
                "using numpy",
                exc_info=True,
            )
        else:
            logger.info(
                "bge_m3_sparse_plugin: compiled lexical-weight pass ready after %.2f s",
                time.perf_counter() - started,
            )

    with _compile_lock:
        if _compiled is not None or _compile_thread is not None:
            return
        _compile_thread = threading.Thread(target=run, name="bge-m3-sparse-compile", daemon=True)
        # A short-lived process (an offline script, the index command) must not
        # tear down the interpreter while this thread is inside LLVM.
        atexit.register(_compile_thread.join, 60)
    _compile_thread.start()


def lexical_weights_flat_numpy(
    ids: np.ndarray, weights: np.ndarray, lengths: np.ndarray, skip_ids: Iterable[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`lexical_weights_flat` as a handful of numpy calls for the whole
    batch, none per token or per sequence."""
    n_seq = len(lengths)
    ids = np.asarray(ids).astype(np.int32, copy=False)
    w = np.asarray(weights)
    seq = np.repeat(np.arange(n_seq, dtype=np.int32), lengths)

    keep = w > 0
    skip = np.fromiter(skip_ids, dtype=np.int32)
    if skip.size:
        keep &= ~np.isin(ids, skip)
    where = np.flatnonzero(keep)
    ids_k, w_k, seq_k = ids[where], w[where], seq[where]
    n = ids_k.size
    if n == 0:
        return ids_k, w_k, np.zeros(n_seq + 1, dtype=np.int64)

    # Group equal (sequence, id) pairs with two stable 16-bit sorts (numpy
    # sorts 16-bit keys stably with a linear radix sort): by the id's low 16
    # bits, then by (sequence, the id's high bits). Stability keeps each group
    # in position order, so its first member is the id's first kept
    # occurrence in that sequence.
    high_bits = (int(ids_k.max()) >> 16).bit_length()
    if (n_seq - 1) << high_bits > 0xFFFF:
        # Too many sequences for one 16-bit key: split the batch in two.
        half = n_seq // 2
        cut = int(lengths[:half].sum())
        a_ids, a_w, a_b = lexical_weights_flat_numpy(ids[:cut], w[:cut], lengths[:half], skip)
        b_ids, b_w, b_b = lexical_weights_flat_numpy(ids[cut:], w[cut:], lengths[half:], skip)
        bounds = np.concatenate([a_b, b_b[1:] + a_b[-1]])
        return np.concatenate([a_ids, b_ids]), np.concatenate([a_w, b_w]), bounds
    order = np.argsort((ids_k & 0xFFFF).astype(np.uint16), kind="stable")
    major = (seq_k << high_bits) | (ids_k >> 16)
    order = order[np.argsort(major[order].astype(np.uint16), kind="stable")]
    grouped = (major[order].astype(np.int64) << 16) | (ids_k[order] & 0xFFFF)
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
    best = np.maximum.reduceat(w_k[order], starts)
    first = order[starts]  # the position of each group's first member

    # Back to position order without another sort: mark the first members.
    is_first = np.zeros(n, dtype=bool)
    is_first[first] = True
    best_at = np.empty_like(w_k)
    best_at[first] = best
    out_seq = seq_k[is_first]
    bounds = np.searchsorted(out_seq, np.arange(n_seq + 1))
    return ids_k[is_first], best_at[is_first], bounds


def prune_flat(
    weights: np.ndarray,
    bounds: np.ndarray,
    top_k: int | None = None,
    min_weight: float | None = None,
) -> np.ndarray:
    """Which entries of concatenated lexical weights survive the pruning options.

    ``weights`` and ``bounds`` are as :func:`lexical_weights_flat` returns
    them. An entry is kept when its weight is at least ``min_weight`` and it
    is among its sequence's ``top_k`` largest, ties going to the entry that
    comes first. Returns a boolean mask over the entries, so that the kept
    ones stay in their order.
    """
    keep = np.ones(weights.size, dtype=bool)
    if min_weight is not None:
        # In float64, as the weights are reported: numpy would otherwise
        # round min_weight to the weights' float32.
        keep &= weights.astype(np.float64) >= float(min_weight)
    if top_k is not None:
        n_seq = bounds.size - 1
        seq = np.repeat(np.arange(n_seq), np.diff(bounds))
        # Candidates sorted by sequence, then weight descending; lexsort is
        # stable, so equal weights stay in position order.
        candidates = np.flatnonzero(keep)
        order = candidates[np.lexsort((-weights[candidates], seq[candidates]))]
        seq_sorted = seq[order]
        group_start = np.searchsorted(seq_sorted, seq_sorted, side="left")
        rank = np.arange(order.size) - group_start
        keep[:] = False
        keep[order[rank < top_k]] = True
    return keep


def prune(
    ids: np.ndarray,
    weights: np.ndarray,
    bounds: np.ndarray,
    top_k: int | None = None,
    min_weight: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`prune_flat` applied: the kept ids and weights, in their order, and
    each sequence's new bounds (a sequence may keep nothing)."""
    if top_k is None and min_weight is None:
        return ids, weights, bounds
    mask = prune_flat(weights, bounds, top_k, min_weight)
    kept_before = np.concatenate([[0], np.cumsum(mask)])  # kept entries before each position
    return ids[mask], weights[mask], kept_before[bounds]


def split_pooled_outputs(
    token_ids: np.ndarray,
    token_lengths: np.ndarray,
    values: np.ndarray,
    value_lengths: np.ndarray,
    dense_size: int,
    bos_token_id: int,
    eos_token_id: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Line up vLLM's pooled outputs with their token ids, for a whole batch.

    Each sequence's output is ``dense_size`` dense values, then one weight per
    token but the first when it is BOS and the last when it is EOS (vLLM's
    ``BOSEOSFilter``). Takes the concatenated ids and outputs with their
    lengths; returns the ids that have weights, the weights, each sequence's
    weight count, and where each sequence's dense part starts in ``values``.
    """
    tok_end = np.cumsum(token_lengths)
    tok_start = tok_end - token_lengths
    val_end = np.cumsum(value_lengths)
    val_start = val_end - value_lengths
    has_bos = token_ids[tok_start] == bos_token_id
    has_eos = (token_ids[tok_end - 1] == eos_token_id) & (token_lengths > has_bos)
    n_weights = value_lengths - dense_size
    expected = token_lengths - has_bos - has_eos
    bad = np.flatnonzero(n_weights != expected)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"the engine returned {int(n_weights[i])} token weights for a sequence of "
            f"{int(token_lengths[i])} tokens; expected {int(expected[i])} (BOS/EOS removed)"
        )
    id_mask = np.ones(token_ids.size, dtype=bool)
    id_mask[tok_start[has_bos]] = False
    id_mask[tok_end[has_eos] - 1] = False
    value_mask = np.ones(values.size, dtype=bool)
    if dense_size:
        offsets = np.arange(values.size) - np.repeat(val_start, value_lengths)
        value_mask &= offsets >= dense_size
    return token_ids[id_mask], values[value_mask], n_weights, val_start
