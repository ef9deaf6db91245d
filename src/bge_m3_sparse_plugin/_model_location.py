"""Where a ``--model`` name points: a folder here, the Hugging Face cache, or the hub.

vLLM takes a folder or a model hub id and finds out which only as its engine
starts: a mistyped folder becomes a hub id, and fails after a minute of
retries against the hub with a long traceback. :func:`locate_model` answers
first, in one line: the index command and ``doctor`` ask it before anything
starts.

A name that can only be a path is a folder that is missing: one that starts
with ``.``, ``/`` or ``~``, one with more than one ``/`` (a hub id is
``NAME`` or ``ORG/NAME``), or one whose first folder exists here (``models``
after the quick start). Any other name may be a hub id: it is found in the
Hugging Face cache, or asked of the hub (``HF_ENDPOINT``), unless
``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HUB_TIMEOUT_S", "Location", "locate_model"]

# How long the hub may take to say whether it has a model.
HUB_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Location:
    """Exactly one of: a folder, a hub id vLLM downloads, or why neither."""

    folder: Path | None = None
    hub_id: str | None = None
    problem: str | None = None  # one line, naming the model and each reading of it
    path_only: bool = False  # the name can only be a path: the problem is a missing folder


def _only_a_path(model: str) -> str | None:
    """Why ``model`` cannot be a hub id, or None when it may be one."""
    if model.startswith((".", "/", "~")):
        return f"it starts with {model[0]!r}"
    if model.count("/") > 1:
        return "a hub id has at most one '/' (ORG/NAME)"
    first = model.split("/", 1)[0]
    if "/" in model and Path(first).is_dir():
        return f"{first}/ is a folder here"
    return None


def _hub_says(model: str) -> str | None:
    """Why the hub will not give ``model``, or None when it has it."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    endpoint = constants.ENDPOINT
    try:
        HfApi().model_info(model, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return f"the model hub ({endpoint}) has it, gated: log in first (hf auth login)"
    except RepositoryNotFoundError:
        return f"the model hub ({endpoint}) has no model of that name"
    except Exception as exc:  # noqa: BLE001 -- no network, a proxy, a hub that is down
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"the model hub ({endpoint}) cannot be reached ({type(exc).__name__}: {reason})"
    return None


def locate_model(model: str, ask_hub: bool = True) -> Location:
    """Where ``model`` is; ``ask_hub`` False takes a possible hub id as it is."""
    path = Path(model).expanduser()
    if path.is_dir():
        return Location(folder=path)
    why = _only_a_path(model)
    if why is not None:
        return Location(
            problem=f"{model}: no such folder (a path, not a model hub id: {why})",
            path_only=True,
        )
    try:
        from huggingface_hub import snapshot_download

        return Location(folder=Path(snapshot_download(model, local_files_only=True)))
    except Exception:  # noqa: BLE001 -- not in the cache, whatever the reason
        pass
    if not ask_hub:
        return Location(hub_id=model)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return Location(
            problem=f"{model}: no such folder here, and not in the Hugging Face cache "
            "(HF_HUB_OFFLINE is set, so the model hub is not asked)"
        )
    said = _hub_says(model)
    if said is not None:
        return Location(problem=f"{model}: no such folder here, and {said}")
    return Location(hub_id=model)
