"""BgeM3OnePassModel: vLLM's BgeM3EmbeddingModel, whose ``embed&token_classify``
pooling also gives each token's ColBERT vector, from the same forward pass,
to the requests that ask for it.

vLLM's BgeM3EmbeddingModel pools the dense vector and the token weights in
one task and the ColBERT vectors in another, so a request for all three ran
each input twice. Here the ``embed&token_classify`` pooler is vLLM's own
(``BgeM3Pooler``: the dense vector, then one weight per token), and for a
request whose ``PoolingParams.extra_kwargs`` holds :data:`COLBERT_KWARG`,
the model's own ``token_embed`` pooler runs on the same hidden states and its
vectors follow, token by token::

    [dense (hidden)] [weights (tokens - BOS - EOS)] [ColBERT (tokens - BOS) x hidden]

``extra_kwargs`` travels with each request to the worker's pooler
(``PoolingMetadata.pooling_params``), and the ``vllm.general_plugins`` entry
point registers the class in every vLLM process (``register_model`` in the
package). A request without the key gets vLLM's output unchanged, and
vLLM's classes are used as they are: this module subclasses and wraps.

Where vLLM's pieces are not where this module finds them (:func:`missing`),
the class builds vLLM's pooler unchanged and the processor runs ColBERT as a
second pass (``processor.py``); both read the same :func:`missing`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Set
from typing import Any

import torch
from vllm.model_executor.layers.pooler import Pooler
from vllm.model_executor.models.roberta import BgeM3EmbeddingModel

from .._config import VLLM_ARCHITECTURE, hf_overrides_flag
from .._tasks import COLBERT_KWARG, COLBERT_TASK, DEFAULT_TASK

__all__ = ["BgeM3OnePassModel", "OnePassPooler", "missing"]

logger = logging.getLogger("vllm.plugins." + __name__)


def missing() -> str | None:
    """Why this vLLM cannot pool all three outputs in one pass, or None."""
    where = "vllm.model_executor.layers.pooler.special"
    try:
        special = importlib.import_module(where)
    except ImportError as exc:
        return f"vLLM's poolers are not where the plugin looks for them ({exc})"
    if not hasattr(special, "DispatchPooler"):
        return (
            f"vLLM's poolers are not where the plugin looks for them (no DispatchPooler in {where})"
        )
    if not hasattr(BgeM3EmbeddingModel, "_build_pooler"):
        return "vLLM's BgeM3EmbeddingModel has no _build_pooler"
    return None


def wants_colbert(params: Any) -> bool:
    """Whether a request's PoolingParams ask for the ColBERT vectors too."""
    extra = getattr(params, "extra_kwargs", None)
    return bool(extra and extra.get(COLBERT_KWARG))


class OnePassPooler(Pooler):
    """``embed&token_classify``: vLLM's pooler for it, and for the requests
    that ask, the ``token_embed`` pooler's vectors appended to each output."""

    def __init__(self, sparse_and_dense: Pooler, colbert: Pooler) -> None:
        super().__init__()
        self.sparse_and_dense = sparse_and_dense
        self.colbert = colbert

    def get_supported_tasks(self) -> Set[Any]:
        return self.sparse_and_dense.get_supported_tasks()

    def get_pooling_updates(self, task: Any) -> Any:
        colbert_task: Any = COLBERT_TASK  # one of vLLM's PoolingTask literals
        return self.sparse_and_dense.get_pooling_updates(task) | self.colbert.get_pooling_updates(
            colbert_task
        )

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: Any) -> Any:
        outputs = self.sparse_and_dense(hidden_states, pooling_metadata)
        asks = [wants_colbert(params) for params in pooling_metadata.pooling_params]
        if not any(asks):
            return outputs
        # The whole batch of this task goes through the ColBERT head (one
        # matrix product per token, a fraction of a percent of the encoder's
        # work); only the requests that ask keep its vectors.
        vectors = self.colbert(hidden_states, pooling_metadata)
        return [
            torch.cat([out, vecs.reshape(-1).to(out.dtype)]) if ask else out
            for out, vecs, ask in zip(outputs, vectors, asks, strict=True)
        ]


class BgeM3OnePassModel(BgeM3EmbeddingModel):
    """vLLM's BgeM3EmbeddingModel, its ``embed&token_classify`` pooler an
    :class:`OnePassPooler`."""

    def _build_pooler(self, pooler_config: Any) -> Pooler:
        pooler = super()._build_pooler(pooler_config)
        reason = missing()
        if reason is not None:
            logger.warning(
                "bge_m3_sparse_plugin: %s; the model pools as BgeM3EmbeddingModel, and "
                "ColBERT beside sparse or dense runs as a second pass",
                reason,
            )
            return pooler
        from vllm.model_executor.layers.pooler.special import DispatchPooler

        by_task = dict(getattr(pooler, "poolers_by_task", {}))
        if not isinstance(pooler, DispatchPooler) or not {DEFAULT_TASK, COLBERT_TASK} <= set(
            by_task
        ):
            # The processor believes this vLLM pools in one pass (missing() is
            # None): refuse to start rather than answer without the vectors.
            raise RuntimeError(
                f"bge_m3_sparse_plugin: BgeM3EmbeddingModel's pooler on this vLLM is "
                f"{type(pooler).__name__} with tasks {sorted(by_task)}, not the "
                f"{DEFAULT_TASK} and {COLBERT_TASK} poolers the one-pass model extends; "
                f"serve with {hf_overrides_flag(VLLM_ARCHITECTURE)} "
                "(ColBERT beside sparse or dense then runs as a second pass)"
            )
        by_task[DEFAULT_TASK] = OnePassPooler(by_task[DEFAULT_TASK], by_task[COLBERT_TASK])
        return DispatchPooler(by_task)
