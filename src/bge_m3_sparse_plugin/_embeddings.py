"""Pooled outputs to response items: sparse entries, dense vectors, ColBERT
vectors, the whole request at once, in arrays. No vLLM: the processor passes
each output's prompt token ids and pooled data."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import torch

from ._formats import format_sparse
from ._sparse import lexical_weights_flat, prune, split_pooled_outputs
from ._tasks import DEFAULT_TASK, GIVES_COLBERT, GIVES_DENSE, GIVES_SPARSE, ONE_PASS_TASK
from ._vectors import rows_to_base64, to_base64
from .schemas import SparseEmbedding, SparseEmbeddingItem, SparseEmbeddingRequest

__all__ = [
    "Model",
    "ThreeOutputs",
    "colbert_values",
    "colbert_values_of",
    "embedding_items",
    "split_colbert",
    "three_outputs",
]


@dataclass(frozen=True)
class Model:
    """What post-processing needs to know of the model and its tokenizer."""

    hidden_size: int
    bos_token_id: int
    eos_token_id: int
    skip_ids: frozenset[int]  # dropped from lexical weights, as FlagEmbedding does
    decode: Callable[[Sequence[int]], list[str]]  # token strings, as FlagEmbedding's


def embedding_items(
    token_lists: Sequence[Sequence[int]],
    pooled: Sequence[Any],
    request: SparseEmbeddingRequest,
    tasks: Sequence[str],
    model: Model,
) -> list[SparseEmbeddingItem]:
    """One response item per input, holding what ``request`` asks for.

    The outputs come in ``len(tasks)`` runs of one output per input, each
    run from one pooling task (``tasks_for``: sparse and dense, then ColBERT;
    or all three from the plugin's one task).
    """
    n = len(pooled) // len(tasks)
    sparse: list[SparseEmbedding | None] = [None] * n
    dense: list[list[float] | str | None] = [None] * n
    colbert: list[list[list[float]] | list[str] | None] = [None] * n
    as_rows = _base64_rows if request.encoding_format == "base64" else _as_rows
    for k, task in enumerate(tasks):
        run = slice(k * n, (k + 1) * n)
        outputs = pooled[run]
        if task == ONE_PASS_TASK:
            outputs, vectors = split_colbert(token_lists[run], outputs, model)
            colbert = [as_rows(data) for data in vectors]
        elif task in GIVES_COLBERT:
            colbert = [as_rows(data) for data in outputs]
            continue
        pooling_task = DEFAULT_TASK if task == ONE_PASS_TASK else task
        sparse, dense = _sparse_and_dense(token_lists[run], outputs, request, pooling_task, model)
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


@dataclass(frozen=True)
class ThreeOutputs:
    """Each input's three outputs as arrays, as a score reads them: no Python
    object per value."""

    dense: np.ndarray  # (n, hidden) float32
    sparse_ids: np.ndarray  # every input's lexical-weight ids, one after the other
    sparse_weights: np.ndarray  # their weights, float32
    sparse_bounds: np.ndarray  # input i's entries are [bounds[i], bounds[i + 1])
    colbert: list[np.ndarray]  # input i's (tokens, hidden) float32 vectors


def three_outputs(
    token_lists: Sequence[Sequence[int]],
    pooled: Sequence[Any],
    tasks: Sequence[str],
    model: Model,
) -> ThreeOutputs:
    """The outputs of a request that ran ``score_tasks`` (sparse and dense for
    every input, then ColBERT for every input; or all three at once), or
    sparse and dense alone, as arrays."""
    n = len(pooled) // len(tasks)
    if tuple(tasks) == (ONE_PASS_TASK,):
        first, vectors = split_colbert(token_lists, pooled, model)
    else:  # sparse and dense, then ColBERT where asked (a score's modes may not)
        first, vectors = list(pooled[:n]), list(pooled[n:])
    token_ids, token_lengths, values, value_lengths = _flattened(token_lists[:n], first)
    ids, weights, n_weights, dense_starts = split_pooled_outputs(
        token_ids,
        token_lengths,
        values,
        value_lengths,
        model.hidden_size,
        model.bos_token_id,
        model.eos_token_id,
    )
    kept_ids, kept_w, bounds = lexical_weights_flat(ids, weights, n_weights, model.skip_ids)
    rows = dense_starts[:, None] + np.arange(model.hidden_size)
    return ThreeOutputs(
        dense=values[rows],
        sparse_ids=kept_ids,
        sparse_weights=kept_w,
        sparse_bounds=bounds,
        colbert=[_as_matrix(data) for data in vectors],
    )


def colbert_values(
    token_lists: Sequence[Sequence[int]],
    pooled: Sequence[Any],
    tasks: Sequence[str],
    model: Model,
) -> int:
    """How many ColBERT values (tokens x hidden) the outputs of ``tasks`` hold."""
    n = len(pooled) // len(tasks)
    total = 0
    for k, task in enumerate(tasks):
        if task == ONE_PASS_TASK:
            total += colbert_values_of(token_lists[k * n : (k + 1) * n], model)
        elif task in GIVES_COLBERT:
            outputs = pooled[k * n : (k + 1) * n]
            total += sum(int(np.prod(getattr(data, "shape", np.shape(data)))) for data in outputs)
    return total


def colbert_values_of(token_lists: Sequence[Sequence[int]], model: Model) -> int:
    """How many ColBERT values (tokens x hidden) inputs of these token ids
    make, known before they run."""
    return sum(_colbert_rows(ids, model) for ids in token_lists) * model.hidden_size


def split_colbert(
    token_lists: Sequence[Sequence[int]], pooled: Sequence[Any], model: Model
) -> tuple[list[Any], list[Any]]:
    """The outputs of ``ONE_PASS_TASK`` as ``DEFAULT_TASK``'s (the dense
    vector, then the token weights) and each input's ColBERT vectors, a
    (tokens - BOS, hidden) view of the rest: no copy."""
    hidden = model.hidden_size
    heads, vectors = [], []
    for ids, data in zip(token_lists, pooled, strict=True):
        rows = _colbert_rows(ids, model)
        head = hidden + rows - (len(ids) > 0 and ids[-1] == model.eos_token_id and rows > 0)
        size = len(data)
        if size != head + rows * hidden:
            raise ValueError(
                f"the engine returned {size} values for a sequence of {len(ids)} tokens "
                f"with its ColBERT vectors; expected {head + rows * hidden} (the dense "
                f"vector, {head - hidden} token weights and {rows} vectors of {hidden})"
            )
        heads.append(data[:head])
        vectors.append(data[head:].reshape(rows, hidden))
    return heads, vectors


def _colbert_rows(ids: Sequence[int], model: Model) -> int:
    """An input's ColBERT vector count: one per token but a first BOS (as
    FlagEmbedding and vLLM's token_embed pooler drop it)."""
    return len(ids) - (len(ids) > 0 and ids[0] == model.bos_token_id)


def _sparse_and_dense(
    token_lists: Sequence[Sequence[int]],
    pooled: Sequence[Any],
    request: SparseEmbeddingRequest,
    pooling_task: str,
    model: Model,
) -> tuple[list[SparseEmbedding | None], list[list[float] | str | None]]:
    """Each output's sparse entries and dense vector, as the request asks
    (None where it does not)."""
    n = len(pooled)
    token_ids, token_lengths, values, value_lengths = _flattened(token_lists, pooled)
    dense_size = model.hidden_size if pooling_task in GIVES_DENSE else 0
    sparse: list[SparseEmbedding | None] = [None] * n
    dense: list[list[float] | str | None] = [None] * n
    if pooling_task in GIVES_SPARSE:
        ids, weights, n_weights, dense_starts = split_pooled_outputs(
            token_ids,
            token_lengths,
            values,
            value_lengths,
            dense_size,
            model.bos_token_id,
            model.eos_token_id,
        )
        if request.return_sparse:
            sparse = _sparse_entries(ids, weights, n_weights, request, model)
    else:  # a task that gives dense only
        dense_starts = np.cumsum(value_lengths) - value_lengths
    if request.return_dense:
        vector = to_base64 if request.encoding_format == "base64" else np.ndarray.tolist
        dense = [vector(values[start : start + dense_size]) for start in dense_starts.tolist()]
    return sparse, dense


def _sparse_entries(
    ids: np.ndarray,
    weights: np.ndarray,
    n_weights: np.ndarray,
    request: SparseEmbeddingRequest,
    model: Model,
) -> list[SparseEmbedding | None]:
    kept_ids, kept_w, bounds = lexical_weights_flat(ids, weights, n_weights, model.skip_ids)
    kept_ids, kept_w, bounds = prune(kept_ids, kept_w, bounds, request.top_k, request.min_weight)
    id_list, w_list = kept_ids.tolist(), kept_w.tolist()
    tokens = model.decode(id_list) if request.return_tokens else None
    # Plain lists and dicts, built without per-entry validation: these are
    # the plugin's own values, and a response can hold millions.
    return [
        format_sparse(
            id_list[a:b], w_list[a:b], tokens[a:b] if tokens else None, request.sparse_format
        )
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())
    ]


def _flattened(
    token_lists: Sequence[Sequence[int]], pooled: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All the prompts' token ids in one array and each prompt's count; all
    the outputs' data in one float32 array and each output's length."""
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    ids = np.fromiter(chain.from_iterable(token_lists), dtype=np.int64, count=int(lengths.sum()))
    value_lengths = np.fromiter((len(p) for p in pooled), dtype=np.int64, count=len(pooled))
    return ids, lengths, _as_float32(pooled), value_lengths


def _as_matrix(data: Any) -> np.ndarray:
    """One output's values as a float32 array: a view of the engine's CPU
    float32 tensor (the usual case), converted only where it is not one."""
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.float32 or data.device.type != "cpu":
            data = data.to("cpu", torch.float32)
        array: np.ndarray = data.numpy()
        return array
    return np.asarray(data, dtype=np.float32)


def _as_rows(data: Any) -> list[list[float]]:
    """One output's token vectors as float32 values in nested lists."""
    rows: list[list[float]] = _as_matrix(data).tolist()
    return rows


def _base64_rows(data: Any) -> list[str]:
    """One output's token vectors, each its float32 bytes in base64."""
    return rows_to_base64(_as_matrix(data))


def _as_float32(pooled: Sequence[Any]) -> np.ndarray:
    """The outputs' data, concatenated, as one float32 array (one output: a
    view of it). A torch op costs tens of microseconds; a view, one."""
    arrays = [_as_matrix(p).reshape(-1) for p in pooled]
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
