"""Shared pieces of the benchmarks: settings, models, documents, timing."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bge_m3_sparse_plugin._config import cpu_binding, engine_kwargs
from bge_m3_sparse_plugin.tiny_model import TinyModelSpec, build_tiny_model

# The repository, for tests/support (the tests' servers, reference code and corpora).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS_DIR = Path(os.environ.get("BENCH_MODELS_DIR", "models"))

SPECS = {
    "small": TinyModelSpec(),
    "mid": TinyModelSpec(hidden_size=768, num_layers=6, num_heads=12, intermediate_size=3072),
    # Twice the mid model's depth at half its width: how the half-precision
    # drift grows with depth (benchmarks/bench_precision.py).
    "deep": TinyModelSpec(hidden_size=384, num_layers=12, num_heads=6, intermediate_size=1536),
    # bge-m3's width (hidden size 1024) in two layers: what ColBERT vectors and
    # scores cost the API server, without the depth that only the engine pays.
    "wide": TinyModelSpec(
        hidden_size=1024,
        num_layers=2,
        num_heads=16,
        intermediate_size=4096,
        max_position_embeddings=2050,
    ),
    # bge-m3's own size, random (about 570M parameters): for a GPU (benchmarks/gpu.sh).
    "realsize": TinyModelSpec(
        hidden_size=1024,
        num_layers=24,
        num_heads=16,
        intermediate_size=4096,
        max_position_embeddings=8194,
        vocab_size=250002,
    ),
}

# The CPU binding of the index command and the README (the package's own):
# compute on every core (vLLM keeps one for the front end by default, which
# an offline batch run does not need).
CPU_ENGINE_ENV = cpu_binding()


def llm_kwargs(model: Path | str, **settings: object) -> dict[str, object]:
    """vllm.LLM's keywords for the plugin on a CPU (the package's own), float32."""
    return engine_kwargs(gpu=False, model=str(model), **{"dtype": "float32", **settings})


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
    from tests.support.texts import generated_texts

    return generated_texts(n, words_per_doc, seed)


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
