"""Shared pieces of the benchmarks: settings, models, documents, timing."""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bge_m3_sparse_plugin import HF_OVERRIDES  # noqa: F401 (the benchmarks import it from here)
from bge_m3_sparse_plugin.tiny_model import _WORDS, TinyModelSpec, build_tiny_model

MODELS_DIR = Path(os.environ.get("BENCH_MODELS_DIR", "models"))

SPECS = {
    "small": TinyModelSpec(),
    "mid": TinyModelSpec(hidden_size=768, num_layers=6, num_heads=12, intermediate_size=3072),
}

# The engine settings the benchmarks, the demo and the README use on a CPU
# machine: compute on every core (vLLM keeps one for the front end by
# default, which an offline batch run does not need).
CORES = os.cpu_count() or 1
CPU_ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": f"0-{CORES - 1}",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "OMP_NUM_THREADS": str(CORES),
}


def use_cpu_engine_env() -> None:
    """Apply CPU_ENGINE_ENV unless the caller set these variables itself."""
    for key, value in CPU_ENGINE_ENV.items():
        os.environ.setdefault(key, value)


def model_dir(size: str) -> Path:
    path = MODELS_DIR / f"bge-m3-{size}"
    if not (path / "sparse_linear.pt").exists():
        build_tiny_model(path, SPECS[size])
    return path


def documents(n: int, words_per_doc: int, seed: int = 0) -> list[str]:
    """``n`` deterministic documents; each word is one token of the small vocabulary."""
    rng = random.Random(seed)
    words = list(_WORDS) + [w.capitalize() for w in _WORDS[:50]]
    return [" ".join(rng.choice(words) for _ in range(words_per_doc)) + "." for _ in range(n)]


def print_settings(**extra: object) -> None:
    print("settings:")
    print(
        f"  cores visible: {os.cpu_count()}  machine: {platform.machine()}  python: {platform.python_version()}"
    )
    for key, value in extra.items():
        print(f"  {key}: {value}")
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("VLLM_", "OMP_"))}
    print(f"  vLLM/OMP env: {env or '{}'}")


def interleaved(
    runs: dict[str, Callable[[], object]],
    rounds: int,
    before: dict[str, Callable[[], object]] | None = None,
) -> dict[str, list[float]]:
    """Run each callable once per round, alternating, and return the wall times.
    ``before[name]``, if given, runs just before ``runs[name]``, untimed."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            if before and name in before:
                before[name]()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)
