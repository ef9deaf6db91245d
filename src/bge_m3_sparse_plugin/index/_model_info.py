"""What the command knows of the model and the machine before any engine
starts: the model's sizes from its ``config.json``, and whether a GPU is here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from .._missing import is_missing

__all__ = ["hidden_size", "model_config", "on_gpu", "vocab_size"]


def on_gpu() -> bool:
    try:
        import torch
    except ImportError as exc:
        if is_missing(exc, "torch"):
            return False  # vLLM then says what it needs
        raise  # installed and broken: its own error, not a silent CPU run
    return bool(torch.cuda.is_available())


def model_config(model: str) -> dict[str, Any]:
    """The model's ``config.json``: read as JSON from a model folder, or through
    transformers for a hub name. The folder's file is read directly because
    ``AutoConfig`` imports torch, which the command's process on ``--ray``
    otherwise never needs (benchmarks/RESULTS.md, section 16)."""
    path = Path(model) / "config.json"
    if path.is_file():
        return cast(dict[str, Any], json.loads(path.read_text()))
    from transformers import AutoConfig

    return cast(dict[str, Any], AutoConfig.from_pretrained(model).to_dict())


def hidden_size(model: str) -> int:
    """The dense vector's size: the model's hidden size, from its config."""
    return int(model_config(model)["hidden_size"])


def vocab_size(model: str) -> int:
    """How many token ids the model has: a sparse vector's dimension."""
    return int(model_config(model)["vocab_size"])
