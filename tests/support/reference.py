"""Plain reference implementations of the semantics, written as FlagEmbedding does."""

from __future__ import annotations

from collections import defaultdict


def flagembedding_loop(token_weights, input_ids, unused_tokens):
    """FlagEmbedding 1.4.2's ``_process_token_weights`` (a closure inside
    ``M3Embedder.encode_single_device``, so it cannot be called on its own),
    from its loop on, verbatim: the project's one copy of it. It takes the
    unused-token set that FlagEmbedding rebuilds from the tokenizer each call.
    tests/test_reference.py checks these lines against the installed source."""
    result = defaultdict(int)
    for w, idx in zip(token_weights, input_ids):
        if idx not in unused_tokens and w > 0:
            idx = str(idx)
            # w = int(w)
            if w > result[idx]:
                result[idx] = w
    return result


def reference_lexical_weights(token_weights, input_ids, unused_tokens) -> dict[int, float]:
    """:func:`flagembedding_loop`, keys as ints."""
    result = flagembedding_loop(token_weights, input_ids, unused_tokens)
    return {int(k): float(v) for k, v in result.items()}


def reference_prune(
    entries: list[tuple[int, float]], top_k: int | None, min_weight: float | None
) -> list[tuple[int, float]]:
    """``top_k`` and ``min_weight`` as the README states them, one entry at a time."""
    kept = [
        (pos, token, w)
        for pos, (token, w) in enumerate(entries)
        if min_weight is None or w >= min_weight
    ]
    if top_k is not None:
        largest = sorted(kept, key=lambda e: (-e[2], e[0]))[:top_k]  # ties: the earlier entry
        kept = sorted(largest)  # back in their order
    return [(token, w) for _, token, w in kept]
