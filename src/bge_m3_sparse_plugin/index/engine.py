"""One ``vllm.LLM`` with the plugin, turning batches of texts into vectors.

Texts are tokenized here, once, with the model's own tokenizer (truncation as
FlagEmbedding's ``max_length`` does it, ``</s>`` kept), so that an over-long
text is found and reported alone instead of failing its whole batch; the
token ids then go through the plugin's own request path (``LLM.encode`` with
``pooling_task="plugin"``), the code the server runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

from .. import HF_OVERRIDES
from .._missing import is_missing

__all__ = ["EncodeOptions", "Encoded", "Encoder", "EngineSettings", "cpu_engine_env"]


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


def on_gpu() -> bool:
    try:
        import torch
    except ImportError as exc:
        if is_missing(exc, "torch"):
            return False  # vLLM then says what it needs
        raise  # installed and broken: its own error, not a silent CPU run
    return bool(torch.cuda.is_available())


def cpu_engine_env(cores: int | None = None) -> dict[str, str]:
    """vLLM's CPU binding for a batch job: every core computes (vLLM keeps one
    for a server's front end by default, which halved throughput here)."""
    n = cores or os.cpu_count() or 1
    return {
        "VLLM_CPU_OMP_THREADS_BIND": f"0-{n - 1}",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "OMP_NUM_THREADS": str(n),
    }


class Encoder:
    """Holds the engine; :meth:`encode` takes texts, returns vectors and errors."""

    def __init__(self, model: str, options: EncodeOptions, settings: EngineSettings) -> None:
        gpu = on_gpu()
        if not gpu:
            for key, value in cpu_engine_env().items():
                os.environ.setdefault(key, value)
        from vllm import LLM

        from ..processor import max_tokens

        kwargs: dict[str, Any] = {
            "model": model,
            "runner": "pooling",
            "hf_overrides": HF_OVERRIDES,
            "io_processor_plugin": "bge_m3_sparse_plugin",
            "dtype": settings.dtype,
            "tensor_parallel_size": settings.tensor_parallel_size,
            # On a CPU, vLLM's default (0.92 of the memory) refuses to start
            # beside anything else; 0.2 holds a bge-m3 batch.
            "gpu_memory_utilization": settings.gpu_memory_utilization or (0.9 if gpu else 0.2),
        }
        if settings.max_model_len is not None:
            kwargs["max_model_len"] = settings.max_model_len
        if settings.max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = settings.max_num_batched_tokens
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_tokens = max_tokens(self.llm.llm_engine.model_config)
        if options.truncate is not None and options.truncate > self.max_tokens:
            raise ValueError(
                f"--truncate {options.truncate} is more than this model takes ({self.max_tokens} "
                "tokens, special tokens included)"
            )
        self.options = options
        self.hidden_size = int(self.llm.llm_engine.model_config.hf_config.hidden_size)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        limit = self.options.truncate
        if limit is None:
            return list(self.tokenizer(texts, add_special_tokens=True)["input_ids"])
        return list(
            self.tokenizer(texts, add_special_tokens=True, truncation=True, max_length=limit)[
                "input_ids"
            ]
        )

    def encode(self, token_ids: list[list[int]]) -> Encoded:
        data: dict[str, Any] = {
            "input": token_ids,
            "sparse_format": "indices_values",
            "return_dense": self.options.dense,
        }
        if self.options.top_k is not None:
            data["top_k"] = self.options.top_k
        if self.options.min_weight is not None:
            data["min_weight"] = self.options.min_weight
        # The plugin's request, which vLLM hands to the IO processor as is.
        prompt = cast(Any, {"data": data})
        (out,) = self.llm.encode(prompt, pooling_task="plugin", use_tqdm=False)
        items = out.outputs.data
        return Encoded(
            indices=[item.sparse_embedding["indices"] for item in items],
            values=[item.sparse_embedding["values"] for item in items],
            dense=[item.dense_embedding for item in items] if self.options.dense else None,
        )

    def close(self) -> None:
        # vLLM waits up to 5 s for its engine process, then kills it. A shorter
        # wait was tried: the kill leaves a "leaked shared_memory" warning.
        self.llm.llm_engine.engine_core.shutdown()
