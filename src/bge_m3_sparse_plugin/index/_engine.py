"""One ``vllm.LLM`` with the plugin, turning batches of texts into vectors.

Texts are tokenized here, once, with the model's own tokenizer
(``_prompts.tokenize`` says why here); the token ids then go through the
plugin's own request path (``LLM.encode`` with ``pooling_task="plugin"``),
the code the server runs.
"""

from __future__ import annotations

from typing import Any, cast

from .._llm import start_llm, stop_llm
from .._model_length import max_tokens
from .._prompts import tokenize
from ._types import Encoded, EncodeOptions, EngineSettings

__all__ = ["Encoder"]


class Encoder:
    """Holds the engine; :meth:`encode` takes token ids, returns vectors."""

    def __init__(self, llm: Any, options: EncodeOptions, owns_engine: bool = False) -> None:
        """An encoder on ``llm``, a ``vllm.LLM`` with the plugin; :meth:`close`
        stops the engine only when ``owns_engine`` (:meth:`start` made it)."""
        self.llm, self.owns_engine = llm, owns_engine
        self.tokenizer = llm.get_tokenizer()
        self.max_tokens = max_tokens(llm.llm_engine.model_config)
        if options.truncate is not None and options.truncate > self.max_tokens:
            raise ValueError(
                f"--truncate {options.truncate} is more than this model takes ({self.max_tokens} "
                "tokens, special tokens included)"
            )
        self.options = options

    @classmethod
    def start(cls, model: str, options: EncodeOptions, settings: EngineSettings) -> Encoder:
        """An engine of its own for ``model``, stopped by :meth:`close`."""
        llm = start_llm(
            model,
            dtype=settings.dtype,
            tensor_parallel_size=settings.tensor_parallel_size,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            max_num_batched_tokens=settings.max_num_batched_tokens,
        )
        try:
            return cls(llm, options, owns_engine=True)
        except BaseException:
            stop_llm(llm)
            raise

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return tokenize(self.tokenizer, texts, self.options.truncate)

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
        if self.owns_engine:
            stop_llm(self.llm)
