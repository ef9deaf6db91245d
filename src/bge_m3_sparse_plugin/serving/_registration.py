"""The ``vllm.general_plugins`` entry point, which vLLM loads in each of its
processes (API servers, engine core, workers): registers the plugin's
architecture, ``BgeM3OnePassModel`` (``_one_pass.py``), by name, so that its
module, and vLLM's model code, are imported only by a vLLM that loads it.

Nothing else changes: a model is loaded as this one only when its
``architectures`` (``--hf-overrides``) name it."""

from __future__ import annotations

from .._config import ONE_PASS_ARCHITECTURE, ONE_PASS_MODEL

__all__ = ["register_model"]


def register_model() -> None:
    from vllm import ModelRegistry

    if ONE_PASS_ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ONE_PASS_ARCHITECTURE, ONE_PASS_MODEL)
