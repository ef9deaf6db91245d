"""The sparse arithmetic, as pure functions on numpy arrays.

FlagEmbedding's ``BGEM3FlagModel.encode`` turns per-token weights into
lexical weights with a Python loop over the tokens
(``_process_token_weights``): it drops the cls, eos, pad and unk ids
wherever they are, keeps weights > 0, keeps each id's largest weight, and
orders the ids by their first kept occurrence. These functions compute the
same result without per-token Python work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["token_weight_span", "lexical_weights", "lexical_weights_batch"]


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
    return lexical_weights_batch([token_ids], [weights], skip_ids)[0]


def lexical_weights_batch(
    token_ids: Sequence[np.ndarray], weights: Sequence[np.ndarray], skip_ids: Iterable[int]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`lexical_weights` of many sequences, computed in one pass.

    All sequences are concatenated and keyed by (sequence, id), so the cost is
    a handful of numpy calls for the whole batch rather than per sequence.
    """
    if len(token_ids) != len(weights):
        raise ValueError(f"{len(token_ids)} id sequences but {len(weights)} weight sequences")
    n_seq = len(token_ids)
    if n_seq == 0:
        return []
    lengths = np.fromiter(map(len, token_ids), dtype=np.int64, count=n_seq)
    if not np.array_equal(lengths, np.fromiter(map(len, weights), dtype=np.int64, count=n_seq)):
        raise ValueError("each sequence needs as many weights as token ids")
    ids = np.concatenate(token_ids).astype(np.int32, copy=False)
    w = np.concatenate(weights)
    if ids.ndim != 1 or w.ndim != 1:
        raise ValueError("token_ids and weights must be sequences of 1-D arrays")
    seq = np.repeat(np.arange(n_seq, dtype=np.int32), lengths)

    keep = w > 0
    skip = np.fromiter(skip_ids, dtype=np.int32)
    if skip.size:
        keep &= ~np.isin(ids, skip)
    where = np.flatnonzero(keep)
    ids_k, w_k, seq_k = ids[where], w[where], seq[where]
    n = ids_k.size

    # Group equal (sequence, id) pairs with two stable 16-bit sorts (numpy
    # sorts 16-bit keys stably with a linear radix sort): by the id's low 16
    # bits, then by (sequence, the id's high bits). Stability keeps each group
    # in position order, so its first member is the id's first kept
    # occurrence in that sequence.
    high_bits = max(int(ids_k.max()) >> 16, 0).bit_length() if n else 0
    if n_seq << high_bits > 0xFFFF:
        # Too many sequences for one 16-bit key: split the batch.
        half = n_seq // 2
        return lexical_weights_batch(
            token_ids[:half], weights[:half], skip
        ) + lexical_weights_batch(token_ids[half:], weights[half:], skip)
    order = np.argsort((ids_k & 0xFFFF).astype(np.uint16), kind="stable")
    major = (seq_k << high_bits) | (ids_k >> 16)
    order = order[np.argsort(major[order].astype(np.uint16), kind="stable")]
    grouped = (major[order].astype(np.int64) << 16) | (ids_k[order] & 0xFFFF)
    starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if n else order
    best = np.maximum.reduceat(w_k[order], starts) if n else w_k
    first = order[starts]  # the position of each group's first member

    # Back to position order without another sort: mark the first members.
    is_first = np.zeros(n, dtype=bool)
    is_first[first] = True
    best_at = np.empty_like(w_k)
    best_at[first] = best
    out_ids, out_w, out_seq = ids_k[is_first], best_at[is_first], seq_k[is_first]
    bounds = np.searchsorted(out_seq, np.arange(n_seq + 1))
    return [
        (out_ids[bounds[i] : bounds[i + 1]], out_w[bounds[i] : bounds[i + 1]])
        for i in range(n_seq)
    ]
