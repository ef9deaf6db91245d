"""One ``vllm.LLM`` with the plugin, in this process: started with the
package's engine settings (``_config.engine_kwargs``), stopped by vLLM's own
shutdown, and shared by the callers that ask for the same one.

The index command's encoder and the drop-in classes
(``integrations.flagembedding``, ``integrations.milvus``) start their engines
here. A program that makes two drop-ins of one model (pymilvus code often
holds an embedding function beside the FlagEmbedding model it wraps) gets one
engine, not two: a second engine on one GPU would find the memory the first
reserved (``gpu_memory_utilization``) taken. Calls into a shared engine are
serialised by its lock, as ``vllm.LLM`` is not made for two threads at once.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from ._config import ENGINE_STOP_TIMEOUT_S, cpu_binding, engine_kwargs
from .index._model_info import on_gpu

__all__ = ["SharedLLM", "engine_arguments", "release", "share", "start_llm", "stop_llm"]


def start_llm(model: str, **settings: Any) -> Any:
    """A ``vllm.LLM`` of the plugin for ``model``; ``settings`` are
    ``engine_kwargs``'s (dtype, max_model_len, ...; None: vLLM's default)."""
    gpu = on_gpu()
    if not gpu:
        # Before vLLM starts: its engine process inherits them. A Ray
        # replica has set its own range already.
        for key, value in cpu_binding().items():
            os.environ.setdefault(key, value)
    from vllm import LLM

    return LLM(**engine_kwargs(gpu, model=model, **settings))


def stop_llm(llm: Any) -> None:
    """Stop ``llm``'s engine process. vLLM's own shutdown waits for the
    process before it kills it: a kill sooner leaves a "leaked shared_memory"
    warning, and an engine left to the interpreter's exit prints vLLM's
    teardown errors. It waits ``ENGINE_STOP_TIMEOUT_S`` where this vLLM takes
    a timeout: its default (5 s) is shorter than an engine's teardown on a
    busy CPU, and it then force-kills the engine with a warning."""
    shutdown = llm.llm_engine.engine_core.shutdown
    if "timeout" in inspect.signature(shutdown).parameters:
        shutdown(timeout=ENGINE_STOP_TIMEOUT_S)
    else:
        shutdown()


@dataclass
class SharedLLM:
    """An engine and who holds it; ``lock`` is held around each call into it."""

    llm: Any
    key: str
    users: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)


_shared: dict[str, SharedLLM] = {}
_sharing = threading.Lock()  # held while an engine is looked up, started or stopped


def share(model: str, **settings: Any) -> SharedLLM:
    """The engine of ``model`` with ``settings`` in this process: the one
    running, or a new one. Give it back with :func:`release`."""
    key = json.dumps({"model": model, **settings}, sort_keys=True, default=repr)
    with _sharing:
        held = _shared.get(key)
        if held is not None:
            held.users += 1
            return held
        held = _shared[key] = SharedLLM(start_llm(model, **settings), key)
        return held


def release(held: SharedLLM) -> None:
    """One holder of ``held`` is done; the last one stops the engine."""
    with _sharing:
        held.users -= 1
        if held.users > 0:
            return
        _shared.pop(held.key, None)
    with held.lock:  # a call in flight in another thread ends first
        stop_llm(held.llm)


def engine_arguments() -> frozenset[str]:
    """The keywords ``vllm.LLM`` takes for its engine (vLLM's ``EngineArgs``)."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    return frozenset(f.name for f in dataclasses.fields(EngineArgs))
