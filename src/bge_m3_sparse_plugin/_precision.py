"""Which precision the plugin's own engines run bge-m3 at, and why, in one line.

vLLM's ``dtype="auto"`` runs a float32 pooling model at float16 wherever the
platform lists it (``_resolve_auto_dtype`` in vLLM's ``config/model.py``):
every CUDA GPU, and every x86 CPU. On a GPU that is right: tensor cores, and
FlagEmbedding's own default (``use_fp16=True``). On a CPU it is not: a CPU
without float16 matrix instructions converts to float32 and back, and ran at
0.23x float32's speed (benchmarks/RESULTS.md, section 19), while a CPU with
bfloat16 instructions (AVX512_BF16, AMX) runs bfloat16 faster than float32,
within the parity criterion of tests/support/parity.py (no further from
FlagEmbedding at float32 than FlagEmbedding at bfloat16 is).

So ``auto``, in the index command and :func:`~._config.engine_kwargs`, means:
vLLM's own choice on a GPU; bfloat16 on a CPU that has those instructions;
float32 on any other CPU. Any other ``--dtype`` is vLLM's, as given.
Imports neither vLLM nor torch (matmul_speed imports torch when it runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "AUTO",
    "CPU_BF16_FLAGS",
    "Precision",
    "choose_precision",
    "cpu_flags",
    "matmul_speed",
]

AUTO = "auto"
# /proc/cpuinfo flags of the instructions that compute bfloat16 products
# natively: AMX's tiles (Sapphire Rapids and later) and AVX-512's BF16 dot
# products (Cooper Lake, Zen 4 and later). Measured on both kinds
# (benchmarks/RESULTS.md, section 19).
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class Precision:
    """The dtype an engine gets, and why, as the index command says it."""

    dtype: str  # vLLM's --dtype: "auto" only on a GPU (vLLM's own choice there)
    reason: str

    def line(self) -> str:
        shown = "vLLM's auto (float16 for bge-m3)" if self.dtype == AUTO else self.dtype
        return f"precision: {shown}: {self.reason}"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """This CPU's feature flags (Linux's /proc/cpuinfo; none elsewhere)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, arm64
            return frozenset(value.split())
    return frozenset()


def choose_precision(requested: str | None, gpu: bool, flags: frozenset[str]) -> Precision:
    """The dtype for ``requested`` (None or "auto": choose) on this machine."""
    if requested not in (None, AUTO):
        return Precision(requested, "as --dtype asked")
    if gpu:
        return Precision(
            AUTO, "on a GPU, as FlagEmbedding's use_fp16=True; --dtype float32 for its fp32 values"
        )
    native = sorted(flag for flag in CPU_BF16_FLAGS if flag in flags)
    if native:
        return Precision(
            "bfloat16",
            f"this CPU has bfloat16 instructions ({', '.join(native)}): faster than float32, "
            "as close to FlagEmbedding fp32 as its own bfloat16; --dtype float32 for its fp32 "
            "values",
        )
    return Precision(
        "float32",
        "this CPU has no bfloat16 instructions; vLLM's auto would pick float16, which ran at "
        "0.23x float32 on a CPU without float16 arithmetic",
    )


def matmul_speed(dtypes: tuple[str, ...], size: int, seconds: float = 0.25) -> dict[str, float]:
    """Each dtype's matrix-product speed on this CPU, over float32's (float32:
    1.0): torch's own ``mm`` of ``size`` x ``size`` matrices (the model's
    hidden size), on the threads torch has, ``seconds`` each. What vLLM's
    linear layers, most of an encoder's work, get from that dtype here."""
    import time

    import torch

    def rate(name: str) -> float:
        a = torch.randn(512, size, dtype=getattr(torch, name))
        b = torch.randn(size, size, dtype=a.dtype)
        torch.mm(a, b)  # the library picks its kernel
        runs, start = 0, time.perf_counter()
        while runs < 2 or time.perf_counter() - start < seconds:
            torch.mm(a, b)
            runs += 1
        return runs / (time.perf_counter() - start)

    base = rate("float32")
    return {name: rate(name) / base for name in dtypes}
