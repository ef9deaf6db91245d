"""Make vLLM's ``--api-key`` guard the ``/pooling`` route that serves the plugin.

vLLM's ``AuthenticationMiddleware`` checks the key only on paths under its
module-level ``GUARDED_PREFIX`` (``/v1``, ``/v2``, ``/inference``,
``/cohere`` in vLLM 0.32), and ``/pooling`` is outside them: with
``--api-key`` set, ``/pooling`` answered anyone.

Why extending ``GUARDED_PREFIX`` from the processor's constructor, and not
another way:

- The middleware reads the module global on every request, so a change made
  at any time before the first request takes effect, whichever of the app and
  the processor vLLM builds first.
- vLLM builds the processor inside every API-server process
  (``--api-server-count N`` included) before that process serves, so each
  process guards its own route, and nothing has to be shared or remembered.
- The middleware itself stays vLLM's: the same 401, the same constant-time
  comparison, ``--api-key`` and ``VLLM_API_KEY`` with vLLM's precedence, and
  no key configured means no middleware and so no change.
- The alternatives need the user: ``--middleware`` is a flag to remember, and
  wrapping the app needs a hook vLLM does not give plugins.

The constant has lived in two modules (``serve.utils.server_utils`` before
``serve.middleware.authenticate``); both are looked for. If neither exists,
the plugin logs a warning rather than pretend the route is guarded.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, cast

__all__ = ["MIDDLEWARE_MODULES", "POOLING_PREFIX", "guard_pooling_route"]

logger = logging.getLogger("vllm.plugins.bge_m3_sparse_plugin.guard")

POOLING_PREFIX = "/pooling"
MIDDLEWARE_MODULES = (
    "vllm.entrypoints.serve.middleware.authenticate",  # vLLM 0.29 to 0.34
    "vllm.entrypoints.serve.utils.server_utils",  # earlier
)


def guard_pooling_route() -> str | None:
    """Add ``/pooling`` to the prefixes vLLM's API-key middleware checks.

    Returns the name of the module changed (or already guarding it), or None
    when no vLLM middleware module was found.
    """
    for name in MIDDLEWARE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        prefixes = getattr(module, "GUARDED_PREFIX", None)
        if not isinstance(prefixes, tuple) or not hasattr(module, "AuthenticationMiddleware"):
            continue
        if not POOLING_PREFIX.startswith(prefixes):  # vLLM already guards it: add nothing
            cast(Any, module).GUARDED_PREFIX = (*prefixes, POOLING_PREFIX)
            logger.info(
                "bge_m3_sparse_plugin: an API key, when configured, now guards %s too",
                POOLING_PREFIX,
            )
        return name
    logger.warning(
        "bge_m3_sparse_plugin: vLLM's API-key middleware was not found in %s; "
        "--api-key may not guard %s on this vLLM. Put the server behind a proxy "
        "that checks the key",
        " or ".join(MIDDLEWARE_MODULES),
        POOLING_PREFIX,
    )
    return None
