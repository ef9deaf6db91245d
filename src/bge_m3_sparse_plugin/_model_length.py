"""The longest prompt the model takes: its position table, and vLLM's
``max_model_len``. Pure: reads a config, imports no vLLM."""

from __future__ import annotations

from typing import Any

__all__ = ["max_tokens", "positions"]


def positions(config: dict[str, Any]) -> int | None:
    """How many token positions an (XLM-)RoBERTa config has, or None for another model.

    (XLM-)RoBERTa numbers positions from ``pad_token_id + 1``, so it has
    ``max_position_embeddings - pad_token_id - 1`` of them (8192 for
    bge-m3), while vLLM lets ``max_model_len`` reach
    ``max_position_embeddings``: a longer prompt would index past the table.
    """
    max_positions, pad = config.get("max_position_embeddings"), config.get("pad_token_id")
    if "roberta" in str(config.get("model_type", "")) and max_positions and pad is not None:
        return int(max_positions) - int(pad) - 1
    return None


def max_tokens(model_config: Any) -> int:
    """The longest sequence that vLLM's ``model_config`` lets the model take."""
    limit = int(model_config.max_model_len)
    hf_config = model_config.hf_config
    keys = ("max_position_embeddings", "pad_token_id", "model_type")
    longest = positions({key: getattr(hf_config, key, None) for key in keys})
    return limit if longest is None else min(limit, longest)
