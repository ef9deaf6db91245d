"""Run the plugin's per-request work off the API server's event loop.

Why: vLLM (each release in ``SUPPORTED_VLLM``) builds a /pooling request's
prompts in ``get_request_factory_online``, which calls the IO processor's
``parse_data`` and ``pre_process`` synchronously, on the API server's event
loop. What the plugin does there grows with the request: parsing and checking
a request's data, and for a score tokenizing each distinct text with its own
cut (vLLM applies one cut to a whole request). While it runs, that process
answers nothing else, ``/health`` included.

How: ``ServingPooling._preprocessing`` (the coroutine that calls the request
factory) is wrapped once per process, from the processor's constructor, as
``_guard.py`` wraps vLLM's middleware. For a request to this plugin, the
factory runs in a worker thread (``asyncio.to_thread``, which carries the
request's context variables), and vLLM's own ``_preprocessing`` then goes on
with the requests it made. Every other request takes vLLM's path untouched.
:data:`REQUEST_TASK` tells ``pre_process`` which asyncio task the request is,
so that the id it claims is freed when that task ends, as on the loop.

If vLLM has no such method, the plugin logs a warning and its work stays on
the loop, where the limits per request bound it (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import logging
from collections.abc import Callable
from typing import Any, cast

__all__ = ["REQUEST_TASK", "SERVING_MODULE", "offload_preprocessing"]

logger = logging.getLogger("vllm.plugins.bge_m3_sparse_plugin.serving._offload")

SERVING_MODULE = "vllm.entrypoints.pooling.pooling.serving"
_WRAPPED = "_bge_m3_sparse_offloads_preprocessing"

# The request's event loop and asyncio task, for the thread that builds its prompts.
REQUEST_TASK: contextvars.ContextVar[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None] = (
    contextvars.ContextVar("bge_m3_sparse_request_task", default=None)
)


class _Made:
    """vLLM's IO processor for plugin requests, its request factory's result
    already made (in a thread): vLLM's ``_preprocessing`` asks for it again."""

    def __init__(self, io_processor: Any, requests: Any) -> None:
        self._io_processor, self._requests = io_processor, requests

    def get_request_factory_online(self, ctx: Any) -> Any:
        return self._requests

    def __getattr__(self, name: str) -> Any:
        return getattr(self._io_processor, name)


def offload_preprocessing(is_ours: Callable[[Any], bool]) -> bool:
    """Build the prompts of each request whose plugin ``is_ours`` in a worker
    thread. Returns whether vLLM's serving had the method to wrap."""
    try:
        serving = importlib.import_module(SERVING_MODULE).ServingPooling
        original = serving._preprocessing
    except Exception as exc:  # noqa: BLE001 -- any vLLM without it keeps its own path
        logger.warning(
            "bge_m3_sparse_plugin: vLLM's ServingPooling._preprocessing was not found in "
            "%s (%s); the plugin parses requests and tokenizes scores on the event loop, "
            "bounded by its limits per request",
            SERVING_MODULE,
            exc,
        )
        return False
    if getattr(original, _WRAPPED, False):
        return True

    async def _preprocessing(self: Any, io_processor: Any, ctx: Any) -> Any:
        if not is_ours(getattr(io_processor, "io_processor", None)):
            return await original(self, io_processor, ctx)
        task = cast("asyncio.Task[Any]", asyncio.current_task())  # inside a coroutine: a task
        token = REQUEST_TASK.set((asyncio.get_running_loop(), task))
        try:
            requests = await asyncio.to_thread(io_processor.get_request_factory_online, ctx)
        finally:
            REQUEST_TASK.reset(token)
        return await original(self, _Made(io_processor, requests), ctx)

    setattr(_preprocessing, _WRAPPED, True)
    serving._preprocessing = _preprocessing
    logger.info(
        "bge_m3_sparse_plugin: requests to the plugin are parsed and their prompts built "
        "in a worker thread, off the API server's event loop"
    )
    return True
