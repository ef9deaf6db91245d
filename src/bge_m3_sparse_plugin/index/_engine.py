"""One ``vllm.LLM`` with the plugin, turning batches of texts into vectors.

Texts are tokenized here, once, with the model's own tokenizer (truncation as
FlagEmbedding's ``max_length`` does it, ``</s>`` kept), so that an over-long
text is found and reported alone instead of failing its whole batch; the
token ids then go through the plugin's own request path (``LLM.encode`` with
``pooling_task="plugin"``), the code the server runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .._checks import max_tokens
from .._config import cpu_binding, engine_kwargs
from .._missing import is_missing

__all__ = [
    "EncodeOptions",
    "Encoded",
    "Encoder",
    "EngineSettings",
    "hidden_size",
    "on_gpu",
    "vocab_size",
]


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


def model_config(model: str) -> dict[str, Any]:
    """The model's ``config.json``: read as JSON from a model folder, or through
    transformers for a hub name. The folder's file is read directly because
    ``AutoConfig`` imports torch (about 9 s of CPU on 2 cores), which the
    command's process on ``--ray`` otherwise never needs."""
    path = Path(model) / "config.json"
    if path.is_file():
        return cast(dict[str, Any], json.loads(path.read_text()))
    from transformers import AutoConfig

    return cast(dict[str, Any], AutoConfig.from_pretrained(model).to_dict())


def hidden_size(model: str) -> int:
    """The dense vector's size: the model's hidden size, from its config."""
    return int(model_config(model)["hidden_size"])


def vocab_size(model: str) -> int:
    """How many token ids the model has: a sparse vector's dimension."""
    return int(model_config(model)["vocab_size"])


class Encoder:
    """Holds the engine; :meth:`encode` takes texts, returns vectors and errors."""

    def __init__(self, model: str, options: EncodeOptions, settings: EngineSettings) -> None:
        gpu = on_gpu()
        if not gpu:
            # Before vLLM starts: its engine process inherits them. A Ray
            # replica has set its own range already.
            for key, value in cpu_binding().items():
                os.environ.setdefault(key, value)
        from vllm import LLM

        kwargs = engine_kwargs(
            gpu,
            model=model,
            dtype=settings.dtype,
            tensor_parallel_size=settings.tensor_parallel_size,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            max_num_batched_tokens=settings.max_num_batched_tokens,
        )
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.max_tokens = max_tokens(self.llm.llm_engine.model_config)
        if options.truncate is not None and options.truncate > self.max_tokens:
            raise ValueError(
                f"--truncate {options.truncate} is more than this model takes ({self.max_tokens} "
                "tokens, special tokens included)"
            )
        self.options = options

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
