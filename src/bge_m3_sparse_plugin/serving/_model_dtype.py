"""The dtypes vLLM runs a model at, as vLLM itself decides them: for the doctor."""

from __future__ import annotations

from pathlib import Path

from vllm.config import ModelConfig
from vllm.plugins import load_general_plugins

from .._config import HF_OVERRIDES

__all__ = ["vllm_dtypes"]


def vllm_dtypes(folder: Path) -> tuple[str, str]:
    """The dtype vLLM's ``--dtype auto`` runs the model in ``folder`` at on
    this machine, and its heads' dtype: vLLM's own ModelConfig of it, as ``vllm
    serve`` builds it (the plugin's architecture registered first, as vLLM
    does at start-up)."""
    load_general_plugins()
    config = ModelConfig(model=str(folder), runner="pooling", hf_overrides=HF_OVERRIDES)
    return str(config.dtype).removeprefix("torch."), str(config.head_dtype).removeprefix("torch.")
