"""The plugin's own version, read once from the installed package's metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]


def _own_version() -> str:
    # pyproject.toml is the one place the version is written.
    try:
        return version("bge-m3-sparse-plugin")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


__version__ = _own_version()
