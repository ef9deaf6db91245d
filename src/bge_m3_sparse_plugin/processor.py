"""The vLLM IO processor: request parsing, prompts, and sparse post-processing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError
from vllm.config import VllmConfig
from vllm.exceptions import VLLMValidationError
from vllm.inputs import PromptType
from vllm.outputs import PoolingRequestOutput
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.pooling_params import PoolingParams
from vllm.renderers import BaseRenderer

from .formats import format_sparse
from .guard import guard_pooling_route
from .limits import MAX_CHARS_ENV, MAX_INPUTS_ENV, MAX_PENDING_ENV, Limits
from .metrics import set_pending
from .pending import PendingRequests
from .schemas import (
    SparseEmbedding,
    SparseEmbeddingItem,
    SparseEmbeddingRequest,
    SparseEmbeddingResponse,
    SparseEmbeddingUsage,
    describe_validation_error,
)
from .sparse import lexical_weights_flat, prune, split_pooled_outputs, start_compiling
from .tokens import TokenDecoder, special_token_ids

__all__ = ["BgeM3SparseProcessor", "max_tokens"]

# A child of the "vllm" logger: our lines go where vLLM's go, at its level.
logger = logging.getLogger("vllm.plugins." + __name__)

# What each pooling task of BgeM3EmbeddingModel puts into an output's data.
_GIVES_SPARSE = {"embed&token_classify", "token_classify"}
_GIVES_DENSE = {"embed&token_classify", "embed"}
_GIVES_COLBERT = {"token_embed"}
_DEFAULT_TASK = "embed&token_classify"
_COLBERT_SERVER = """--pooler-config '{"task": "token_embed"}'"""


def _item_field(index: int, single: bool) -> str:
    return "data.input" if single else f"data.input[{index}]"


def max_tokens(model_config: Any) -> int:
    """The longest sequence the model can take.

    (XLM-)RoBERTa numbers positions from ``pad_token_id + 1``, so it has
    ``max_position_embeddings - pad_token_id - 1`` of them (8192 for
    bge-m3), while vLLM 0.32 lets ``max_model_len`` reach
    ``max_position_embeddings``: a longer prompt would index past the table.
    """
    limit = int(model_config.max_model_len)
    hf_config = model_config.hf_config
    max_positions = getattr(hf_config, "max_position_embeddings", None)
    pad = getattr(hf_config, "pad_token_id", None)
    if "roberta" in str(getattr(hf_config, "model_type", "")) and max_positions and pad is not None:
        limit = min(limit, int(max_positions) - int(pad) - 1)
    return limit


@dataclass(frozen=True)
class _Options:
    # The request as parsed, its input dropped: a request that never finishes
    # leaves this behind until evicted, and the texts can be large.
    request: SparseEmbeddingRequest
    single: bool  # the input was one text or one id list: errors say data.input


class BgeM3SparseProcessor(IOProcessor[SparseEmbeddingRequest, SparseEmbeddingResponse]):
    """Serves BGE-M3's lexical weights (and optionally its dense vector).

    Per-request options travel from ``pre_process`` to ``post_process`` in a
    map keyed by request id; the offline ``LLM.encode`` path passes no id, so
    it uses the ``None`` key, which each new call overwrites.
    """

    def __init__(self, vllm_config: VllmConfig, renderer: BaseRenderer) -> None:
        super().__init__(vllm_config, renderer)
        # Each API-server process builds its own processor before it serves:
        # from here on, --api-key guards /pooling too (guard.py says why here).
        guard_pooling_route()
        model_config = vllm_config.model_config
        hf_config = model_config.hf_config
        tokenizer = renderer.get_tokenizer()

        self.hidden_size = int(hf_config.hidden_size)
        self.bos_token_id = int(hf_config.bos_token_id)
        self.eos_token_id = int(hf_config.eos_token_id)
        self.max_tokens = max_tokens(model_config)
        if self.max_tokens < model_config.max_model_len:
            logger.warning(
                "bge_m3_sparse_plugin: the model has %d positions but max_model_len is "
                "%d; start vLLM with --max-model-len %d so that it refuses longer "
                "prompts before running them (the plugin refuses their results)",
                self.max_tokens,
                model_config.max_model_len,
                self.max_tokens,
            )
        self.vocab_size = max(int(model_config.get_vocab_size()), len(tokenizer))
        pooler_config = model_config.pooler_config
        self.pooling_task = (pooler_config and pooler_config.task) or _DEFAULT_TASK

        # The compiled lexical-weight pass is built (or loaded from numba's
        # cache) while the server starts; requests before it is ready take
        # the numpy path, which gives the same result.
        start_compiling()
        self.skip_ids = special_token_ids(tokenizer)
        self.decoder = TokenDecoder(tokenizer)
        limits = Limits.from_env()
        self.max_inputs = limits.max_inputs
        self.max_chars = limits.max_chars
        self.pending: PendingRequests[_Options] = PendingRequests(
            limits.max_pending, on_change=set_pending
        )

    # -- request side -------------------------------------------------------

    def parse_data(self, data: object) -> SparseEmbeddingRequest:
        if isinstance(data, SparseEmbeddingRequest):
            return data
        if not isinstance(data, dict):
            raise VLLMValidationError(
                f"data must be an object with an 'input' field, got {type(data).__name__}",
                parameter="data",
            )
        try:
            return SparseEmbeddingRequest.model_validate(data)
        except ValidationError as exc:
            message, field = describe_validation_error(exc)
            raise VLLMValidationError(message, parameter=field) from None

    def merge_pooling_params(self, params: PoolingParams | None = None) -> PoolingParams:
        # The same for every request: the server's pooling task, with the
        # activations on (normalised dense, relu'd token weights).
        merged = params if params is not None else PoolingParams()
        merged.task = self.pooling_task
        merged.use_activation = True
        return merged

    def pre_process(
        self,
        prompt: SparseEmbeddingRequest,
        request_id: str | None = None,
        **kwargs: Any,
    ) -> Sequence[PromptType]:
        self._check_task(prompt)
        inputs = prompt.inputs()
        if len(inputs) > self.max_inputs:
            raise VLLMValidationError(
                f"data.input has {len(inputs)} items; at most {self.max_inputs} are "
                f"allowed per request (set {MAX_INPUTS_ENV} on the server to change it)",
                parameter="data.input",
            )
        chars = sum(len(item) for item in inputs if isinstance(item, str))
        if chars > self.max_chars:
            raise VLLMValidationError(
                f"data.input holds {chars} characters of text; at most {self.max_chars} are "
                f"allowed per request (split the request, or set {MAX_CHARS_ENV} on the "
                "server to change it)",
                parameter="data.input",
            )
        single = prompt.is_single()
        prompts: list[PromptType] = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                # vLLM tokenizes texts itself, so that a request's
                # truncate_prompt_tokens truncates them as the tokenizer does
                # (keeping </s>), which is what FlagEmbedding's max_length does.
                prompts.append({"prompt": item})
            else:
                top = max(item)
                if top >= self.vocab_size:
                    raise VLLMValidationError(
                        f"{_item_field(i, single)} holds token id {top}, outside the "
                        f"vocabulary [0, {self.vocab_size})",
                        parameter="data.input",
                    )
                prompts.append({"prompt_token_ids": list(item)})
        options = _Options(request=prompt.model_copy(update={"input": ""}), single=single)
        self.pending.put(request_id, options)
        _when_request_ends(lambda: self.pending.discard(request_id, options))
        return prompts

    def _check_task(self, request: SparseEmbeddingRequest) -> None:
        if not (request.return_sparse or request.return_dense or request.return_colbert_vecs):
            raise VLLMValidationError(
                "data.return_sparse, data.return_dense and data.return_colbert_vecs are "
                "all false; ask for at least one",
                parameter="data.return_sparse",
            )
        if request.return_colbert_vecs and self.pooling_task not in _GIVES_COLBERT:
            raise VLLMValidationError(
                f"data.return_colbert_vecs is true, but this server runs the "
                f"{self.pooling_task!r} pooling task, which does not give ColBERT vectors. "
                f"vLLM serves one pooling task per server: start one with {_COLBERT_SERVER} "
                "for ColBERT vectors (and send it data.return_sparse=false), and keep this "
                "one for sparse and dense",
                parameter="data.return_colbert_vecs",
            )
        for flag, wanted, giving in (
            ("return_sparse", request.return_sparse, _GIVES_SPARSE),
            ("return_dense", request.return_dense, _GIVES_DENSE),
        ):
            if wanted and self.pooling_task not in giving:
                raise VLLMValidationError(
                    f"data.{flag} is true, but this server runs the "
                    f"{self.pooling_task!r} pooling task, which does not give it. "
                    "Start the server without --pooler-config.task (BgeM3EmbeddingModel "
                    f"then runs {_DEFAULT_TASK!r}), or send data.{flag}=false",
                    parameter=f"data.{flag}",
                )

    # -- response side ------------------------------------------------------

    def post_process(
        self,
        model_output: Sequence[PoolingRequestOutput],
        request_id: str | None = None,
        **kwargs: Any,
    ) -> SparseEmbeddingResponse:
        options = self.pending.pop(request_id)
        if options is None:
            raise RuntimeError(
                f"bge_m3_sparse_plugin has no options for request {request_id!r}: "
                f"it was evicted after more than {self.pending.max_size} pending "
                f"requests (raise {MAX_PENDING_ENV})"
            )
        for i, out in enumerate(model_output):
            n = len(out.prompt_token_ids or ())
            if n > self.max_tokens:
                raise VLLMValidationError(
                    f"{_item_field(i, options.single)} has {n} tokens, special tokens "
                    f"included; this model takes at most {self.max_tokens}. Shorten it, "
                    f"or send truncate_prompt_tokens <= {self.max_tokens}",
                    parameter="data.input",
                )
        prompt_tokens = sum(len(out.prompt_token_ids or ()) for out in model_output)
        return SparseEmbeddingResponse(
            data=self._items(model_output, options),
            usage=SparseEmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
        )

    def _items(
        self, outputs: Sequence[PoolingRequestOutput], options: _Options
    ) -> list[SparseEmbeddingItem]:
        n = len(outputs)
        sparse: list[SparseEmbedding | None] = [None] * n
        dense: list[list[float] | None] = [None] * n
        colbert: list[list[list[float]] | None] = [None] * n
        if self.pooling_task in _GIVES_COLBERT:
            # _check_task let through only return_colbert_vecs here.
            colbert = [_as_rows(out.outputs.data) for out in outputs]
        else:
            sparse, dense = self._sparse_and_dense(outputs, options.request)
        return [
            SparseEmbeddingItem.model_construct(
                index=i,
                object="sparse-embedding",
                sparse_embedding=sparse[i],
                dense_embedding=dense[i],
                colbert_vecs=colbert[i],
            )
            for i in range(n)
        ]

    def _sparse_and_dense(
        self, outputs: Sequence[PoolingRequestOutput], request: SparseEmbeddingRequest
    ) -> tuple[list[SparseEmbedding | None], list[list[float] | None]]:
        """Each output's sparse entries and dense vector, as the request asks
        (None where it does not): the whole request at once, in arrays."""
        n = len(outputs)
        token_ids, token_lengths = _concatenated_token_ids(outputs)
        pooled = [out.outputs.data for out in outputs]
        value_lengths = np.fromiter((len(p) for p in pooled), dtype=np.int64, count=n)
        values = _as_float32(pooled)
        dense_size = self.hidden_size if self.pooling_task in _GIVES_DENSE else 0
        sparse: list[SparseEmbedding | None] = [None] * n
        dense: list[list[float] | None] = [None] * n
        if self.pooling_task in _GIVES_SPARSE:
            ids, weights, n_weights, dense_starts = split_pooled_outputs(
                token_ids,
                token_lengths,
                values,
                value_lengths,
                dense_size,
                self.bos_token_id,
                self.eos_token_id,
            )
            if request.return_sparse:
                sparse = self._sparse_entries(ids, weights, n_weights, request)
        else:  # only dense; _check_task refused return_sparse
            dense_starts = np.cumsum(value_lengths) - value_lengths
        if request.return_dense:
            dense = [values[start : start + dense_size].tolist() for start in dense_starts.tolist()]
        return sparse, dense

    def _sparse_entries(
        self,
        ids: np.ndarray,
        weights: np.ndarray,
        n_weights: np.ndarray,
        request: SparseEmbeddingRequest,
    ) -> list[SparseEmbedding | None]:
        kept_ids, kept_w, bounds = lexical_weights_flat(ids, weights, n_weights, self.skip_ids)
        kept_ids, kept_w, bounds = prune(
            kept_ids, kept_w, bounds, request.top_k, request.min_weight
        )
        id_list, w_list = kept_ids.tolist(), kept_w.tolist()
        tokens = self.decoder.decode(id_list) if request.return_tokens else None
        # Plain lists and dicts, built without per-entry validation: these are
        # the plugin's own values, and a response can hold millions.
        return [
            format_sparse(
                id_list[a:b], w_list[a:b], tokens[a:b] if tokens else None, request.sparse_format
            )
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())
        ]


def _concatenated_token_ids(
    outputs: Sequence[PoolingRequestOutput],
) -> tuple[np.ndarray, np.ndarray]:
    """All the outputs' prompt token ids in one array, and each output's count."""
    token_lists = [out.prompt_token_ids or [] for out in outputs]
    token_lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(outputs))
    token_ids = np.fromiter(
        chain.from_iterable(token_lists), dtype=np.int64, count=int(token_lengths.sum())
    )
    return token_ids, token_lengths


def _when_request_ends(callback: Any) -> None:
    """Call ``callback`` when the server's task for this request ends, however
    it ends: answered, failed inside vLLM, or abandoned by its client.

    vLLM calls pre_process inside the request's own asyncio task and tells
    the plugin nothing when a request fails after it, so the task's end is
    the one sure sign. Offline there is no task: the next call replaces the
    entry instead.
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop: LLM.encode
        return
    if task is not None:
        task.add_done_callback(lambda _: callback())


def _as_rows(data: Any) -> list[list[float]]:
    """One output's token vectors as float32 values in nested lists."""
    if isinstance(data, torch.Tensor):
        return data.to("cpu", torch.float32).tolist()
    return np.asarray(data, dtype=np.float32).tolist()


def _as_float32(pooled: list[Any]) -> np.ndarray:
    """The outputs' data, concatenated, as one float32 array."""
    if all(isinstance(p, torch.Tensor) for p in pooled):
        return torch.cat([p.reshape(-1) for p in pooled]).to("cpu", torch.float32).numpy()
    return np.concatenate([np.asarray(p, dtype=np.float32).reshape(-1) for p in pooled])
