"""Tell a module that is not installed from one that is installed and broken.

An install hint is the right answer to the first and the wrong one to the
second (an ABI mismatch, a missing shared library, an error in its own
imports): there the real error must be shown, as pluggy does for a plugin
that fails to load.
"""

from __future__ import annotations

__all__ = ["is_missing"]


def is_missing(exc: ImportError, *modules: str) -> bool:
    """Whether ``exc`` says that one of ``modules`` (or a package above one of
    them) is not installed, rather than that something fails inside it."""
    name = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if not name:
        return False
    return any(module == name or module.startswith(name + ".") for module in modules)
