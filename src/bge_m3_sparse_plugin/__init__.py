"""A vLLM IO-processor plugin that serves BAAI/bge-m3's sparse (lexical) embeddings.

Importing this package is cheap: vLLM and torch are imported only when vLLM
loads the processor class named by :func:`register`. The public names are
those in ``__all__``; modules whose names start with ``_`` are internal.
"""

from __future__ import annotations

import os

from ._config import (
    ANY_VLLM_ENV,
    HF_OVERRIDES,
    PLUGIN_NAME,
    PROCESSOR_QUALNAME,
    SUPPORTED_VLLM,
    VLLM_CPU_RELEASE,
    cpu_binding,
    vllm_range,
)
from ._exceptions import (
    BgeM3Error,
    OutputMismatch,
    RequestError,
    SinkError,
    SparseEmbeddingError,
    TableMismatch,
    UnsupportedArgument,
)
from ._version import __version__
from ._vllm_version import check_vllm_version, installed_vllm_version

__all__ = [
    "HF_OVERRIDES",
    "PLUGIN_NAME",
    "PROCESSOR_QUALNAME",
    "SUPPORTED_VLLM",
    "VLLM_CPU_RELEASE",
    "BgeM3Error",
    "OutputMismatch",
    "RequestError",
    "SinkError",
    "SparseEmbeddingError",
    "TableMismatch",
    "UnsupportedArgument",
    "__version__",
    "check_vllm_version",
    "cpu_binding",
    "installed_vllm_version",
    "register",
    "vllm_range",
]


def register() -> str:
    """Entry point of the ``vllm.io_processor_plugins`` group."""
    if os.environ.get(ANY_VLLM_ENV, "") not in ("1", "true"):
        installed = installed_vllm_version()
        if installed is not None:
            check_vllm_version(installed)
    return PROCESSOR_QUALNAME
