"""The arithmetic of the roofline: useful FLOPs of a corpus, and a GEMM's peak.

Useful FLOPs count no padding: what an encoder must compute for each
document of L tokens, with hidden size h, intermediate size i and n layers:

    weights:   2 * L * (n * (4*h*h + 2*h*i) + h)    # Q, K, V, O; up, down; the sparse head
    attention: n * 4 * L*L * h                      # Q K^T and (softmax) V

Embedding look-ups, layer norms, GELU and the residuals are not counted: they
are memory-bound, and a path that spends time on them gets no credit for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

FORMULA = (
    "per document of L tokens: 2*L*(n*(4*h^2 + 2*h*i) + h) for the weights "
    "(Q, K, V, O, the MLP and the sparse head) + n*4*L^2*h for attention "
    "(Q K^T and the weighted sum of V); padding not counted"
)


@dataclass(frozen=True)
class Shape:
    """What decides an encoder's FLOPs."""

    hidden: int
    intermediate: int
    layers: int

    @classmethod
    def of(cls, config: object) -> Shape:
        """From a transformers config (XLM-RoBERTa's names)."""
        return cls(
            hidden=int(config.hidden_size),  # type: ignore[attr-defined]
            intermediate=int(config.intermediate_size),  # type: ignore[attr-defined]
            layers=int(config.num_hidden_layers),  # type: ignore[attr-defined]
        )

    @property
    def weights_per_token(self) -> int:
        """Multiply-adds per token in the weight matrices (each one is 2 FLOPs)."""
        h, i = self.hidden, self.intermediate
        return self.layers * (4 * h * h + 2 * h * i) + h


def useful_flops(lengths: Iterable[int], shape: Shape) -> int:
    """The FLOPs of encoding documents of these token counts, one at a time."""
    total = 0
    for length in lengths:
        total += 2 * length * shape.weights_per_token
        total += shape.layers * 4 * length * length * shape.hidden
    return total


def gemm_shapes(shape: Shape) -> list[tuple[int, int]]:
    """(in, out) of each weight matrix in one layer: the fused Q, K, V; O; up; down."""
    h, i = shape.hidden, shape.intermediate
    return [(h, 3 * h), (h, h), (h, i), (i, h)]


def gemm_peak(shape: Shape, tokens: int, device: str, dtype: str, seconds: float = 3.0) -> float:
    """FLOP/s of torch's matrix multiply on one layer's weight shapes, ``tokens``
    rows at a time, on ``device`` (cpu: the threads torch has; cuda: the GPU)."""
    import torch

    kind = getattr(torch, dtype)
    mats = [
        (
            torch.randn(tokens, n_in, device=device, dtype=kind),
            torch.randn(n_in, n_out, device=device, dtype=kind),
        )
        for n_in, n_out in gemm_shapes(shape)
    ]
    flops_per_pass = sum(2 * tokens * a.shape[1] * b.shape[1] for a, b in mats)

    def one_pass() -> None:
        for a, b in mats:
            torch.mm(a, b)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    one_pass()  # warm-up: the library picks its kernels
    passes, start = 0, time.perf_counter()
    while passes < 3 or time.perf_counter() - start < seconds:
        one_pass()
        passes += 1
    return passes * flops_per_pass / (time.perf_counter() - start)
