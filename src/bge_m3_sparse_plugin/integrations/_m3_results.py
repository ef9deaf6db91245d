"""FlagEmbedding's result shapes from the plugin's answers, and the
arithmetic its ``BGEM3FlagModel`` does beside the model: pure, on arrays.

``encode`` gives ``{"dense_vecs": (n, d) array, "lexical_weights": [dict],
"colbert_vecs": [array]}`` (one input: unbatched), a key None when not
asked; ``compute_score`` a dict of five lists (one pair: five floats). The
numbers are of the dtype FlagEmbedding's would be (:func:`result_dtype`);
lexical weights are ``defaultdict(int)`` keyed by the token id as a string,
in the order of the text's tokens, as FlagEmbedding builds them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _scores as scores
from .._exceptions import SparseEmbeddingError
from ..schemas import SCORE_KEYS, SparseEmbeddingItem

__all__ = [
    "chunks",
    "colbert_score",
    "convert_id_to_token",
    "encode_result",
    "lexical_matching_score",
    "result_dtype",
    "score_result",
    "truncated",
    "with_instruction",
]


def result_dtype(use_fp16: bool, use_bf16: bool, gpu: bool) -> np.dtype[Any]:
    """The dtype of FlagEmbedding's numbers for these arguments: float32 on a
    CPU (it runs the model at float32 there), float16 on a GPU at use_fp16,
    float32 at use_bf16 (numpy has no bfloat16: it casts up)."""
    return np.dtype(np.float16 if gpu and use_fp16 and not use_bf16 else np.float32)


def with_instruction(texts: str | list[str], instruction: str | None, fmt: str) -> str | list[str]:
    """FlagEmbedding's ``get_detailed_instruct``: ``fmt`` holds the instruction
    and the text (``"{}{}"`` by default; a literal ``\\n`` in it is a newline)."""
    if instruction is None:
        return texts
    fmt = fmt.replace("\\n", "\n")
    if isinstance(texts, str):
        return fmt.format(instruction, texts)
    return [fmt.format(instruction, text) for text in texts]


def chunks(costs: Sequence[int], max_items: int, max_cost: int) -> list[slice]:
    """Consecutive runs of items, each of at most ``max_items`` and of costs
    summing to at most ``max_cost``; an item over ``max_cost`` alone is a run
    of its own (the server then refuses it, naming its limit)."""
    runs: list[slice] = []
    start, total = 0, 0
    for i, cost in enumerate(costs):
        if i > start and (i - start == max_items or total + cost > max_cost):
            runs.append(slice(start, i))
            start, total = i, 0
        total += cost
    if len(costs) > start:
        runs.append(slice(start, len(costs)))
    return runs


def truncated(vectors: np.ndarray, dim: int | None) -> np.ndarray:
    """FlagEmbedding's ``truncate_dim``: the first ``dim`` values of each
    vector (the last axis), normalised again. The vectors come normalised,
    so this equals its cut of the raw vector followed by its normalisation."""
    if dim is None or dim >= vectors.shape[-1]:
        return vectors
    cut = vectors[..., :dim].astype(np.float64)
    norms = np.maximum(np.linalg.norm(cut, axis=-1, keepdims=True), 1e-12)  # F.normalize's eps
    out: np.ndarray = (cut / norms).astype(vectors.dtype)
    return out


def _lexical(weights: dict[str, float], dtype: np.dtype[Any]) -> defaultdict[str, Any]:
    out: defaultdict[str, Any] = defaultdict(int)
    values = np.asarray(list(weights.values()), dtype=dtype)
    for key, value in zip(weights, values):
        out[key] = value
    return out


def _present(vectors: np.ndarray | None, what: str) -> np.ndarray:
    if vectors is None:
        raise SparseEmbeddingError(f"the plugin sent no {what} vector, though it was asked")
    return vectors


def encode_result(
    items: Sequence[SparseEmbeddingItem],
    wants: tuple[bool, bool, bool],
    single: bool,
    dtype: np.dtype[Any],
    truncate_dim: int | None,
    hidden_size: int,
) -> dict[str, Any]:
    """``encode``'s dict from the plugin's items (in the inputs' order);
    ``wants`` is (dense, sparse, colbert)."""
    dense, sparse, colbert = wants
    result: dict[str, Any] = {"dense_vecs": None, "lexical_weights": None, "colbert_vecs": None}
    if dense:
        rows = [_present(item.dense_array(), "dense") for item in items]
        matrix = np.stack(rows) if rows else np.zeros((0, hidden_size), dtype=np.float32)
        vectors = truncated(matrix, truncate_dim).astype(dtype, copy=False)
        result["dense_vecs"] = vectors[0] if single else vectors
    if sparse:
        weights = [_lexical(item.sparse_embedding or {}, dtype) for item in items]  # type: ignore[arg-type]
        result["lexical_weights"] = weights[0] if single else weights
    if colbert:
        vecs = [
            truncated(_present(item.colbert_array(), "ColBERT"), truncate_dim).astype(dtype)
            for item in items
        ]
        result["colbert_vecs"] = vecs[0] if single else vecs
    return result


def score_result(scores: Sequence[dict[str, float]], single: bool) -> dict[str, Any]:
    """``compute_score``'s dict of the five keys, in its order, from one dict
    per pair: lists of floats, or floats for a single pair."""
    if single:
        return {key: float(scores[0][key]) for key in SCORE_KEYS}
    return {key: [float(pair[key]) for pair in scores] for key in SCORE_KEYS}


def lexical_matching_score(lw1: Any, lw2: Any) -> Any:
    """``compute_lexical_matching_score``: two dicts give their score (the
    sum, over the first's tokens, of the products of the two weights, in the
    first's order); two lists the matrix of each pair's, as an array."""

    def one(first: dict[str, Any], second: dict[str, Any]) -> Any:
        score: Any = 0
        for token, weight in first.items():
            if token in second:
                score += weight * second[token]
        return score

    if isinstance(lw1, dict) and isinstance(lw2, dict):
        return one(lw1, lw2)
    if isinstance(lw1, list) and isinstance(lw2, list):
        return np.array([[one(a, b) for b in lw2] for a in lw1])
    raise ValueError("The input format of lexical_weights is not correct.")


def colbert_score(q_reps: np.ndarray, p_reps: np.ndarray) -> Any:
    """``colbert_score``: each query vector's best inner product with the
    passage's, summed, over the number of query vectors; a 0-d torch tensor,
    as FlagEmbedding's (a numpy float32 where torch is not installed)."""
    score = np.float32(scores.colbert_score(q_reps, p_reps))
    try:
        import torch
    except ImportError:
        return score
    return torch.tensor(score)


def convert_id_to_token(lexical_weights: Any, decode: Any) -> Any:
    """``convert_id_to_token``: each dict keyed by the token's text instead of
    its id; one dict (or a list of one) gives one dict, as FlagEmbedding's."""
    items = [lexical_weights] if isinstance(lexical_weights, dict) else lexical_weights
    converted = [{decode([int(i)]): weight for i, weight in item.items()} for item in items]
    return converted[0] if len(converted) == 1 else converted
