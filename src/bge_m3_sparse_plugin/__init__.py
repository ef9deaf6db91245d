"""A vLLM IO-processor plugin that serves BAAI/bge-m3's sparse (lexical) embeddings.

Importing this package is cheap: vLLM and torch are imported only when vLLM
loads the processor class named by :func:`register`.
"""

from __future__ import annotations

__all__ = ["register", "PROCESSOR_QUALNAME", "__version__"]

__version__ = "0.1.0"

PROCESSOR_QUALNAME = "bge_m3_sparse_plugin.processor.BgeM3SparseProcessor"


def register() -> str:
    """Entry point of the ``vllm.io_processor_plugins`` group."""
    return PROCESSOR_QUALNAME
