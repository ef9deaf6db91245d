"""The values the index's modules pass one another: what changes the vectors,
how the engine runs, and a batch's vectors. Plain dataclasses, so that the
pure modules (``_job.py``, ``_ray.py``) need not import the engine's module."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EncodeOptions", "Encoded", "EngineSettings"]


@dataclass(frozen=True)
class EncodeOptions:
    """What changes the vectors: recorded in the manifest."""

    top_k: int | None = None
    min_weight: float | None = None
    truncate: int | None = None
    dense: bool = False


@dataclass(frozen=True)
class EngineSettings:
    """How the engine runs: no effect on the vectors but for dtype and max_model_len."""

    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1


@dataclass
class Encoded:
    indices: list[list[int]]
    values: list[list[float]]
    dense: list[list[float]] | None
