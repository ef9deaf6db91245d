"""Plain reference implementations of the semantics, written as FlagEmbedding does."""

from __future__ import annotations

from collections import defaultdict


def reference_lexical_weights(token_weights, input_ids, unused_tokens) -> dict[int, float]:
    """FlagEmbedding 1.4.2's ``_process_token_weights``, keys as ints."""
    result: dict[str, float] = defaultdict(int)
    for w, idx in zip(token_weights, input_ids):
        if idx not in unused_tokens and w > 0:
            idx = str(idx)
            if w > result[idx]:
                result[idx] = w
    return {int(k): float(v) for k, v in result.items()}
