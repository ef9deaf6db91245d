"""The one hand copy of FlagEmbedding's per-token loop (tests/support/reference.py),
checked line for line against the installed FlagEmbedding's source."""

from __future__ import annotations

import inspect

from .support.reference import flagembedding_loop


def _loop_lines(source: str) -> list[str]:
    lines = [line.strip() for line in source.splitlines()]
    start = lines.index("for w, idx in zip(token_weights, input_ids):")
    end = lines.index("return result", start)
    return [line for line in lines[start : end + 1] if line]


def test_the_copy_is_flagembeddings_loop():
    from FlagEmbedding.inference.embedder.encoder_only.m3 import M3Embedder

    theirs = _loop_lines(inspect.getsource(M3Embedder.encode_single_device))
    ours = _loop_lines(inspect.getsource(flagembedding_loop))
    assert len(ours) == 7
    assert ours == theirs


def test_the_copy_keeps_the_largest_weight_per_token_and_skips_the_unused():
    got = flagembedding_loop([0.5, 0.2, 0.9, 0.0, -1.0, 0.7], [5, 6, 5, 7, 8, 0], {0, 1, 2, 3})
    assert dict(got) == {"5": 0.9, "6": 0.2}
