"""The three shapes of a sparse embedding, and the reader of any of them.

Pure Python with no numpy, vLLM or torch, so that the client can use it:

- ``"token_weights"``: ``[{"token_id": 87, "weight": 0.19, "token": "I"}, ...]``;
- ``"lexical_weights"``: FlagEmbedding's ``{"87": 0.19, ...}``;
- ``"indices_values"``: ``{"indices": [87, ...], "values": [0.19, ...]}``, as
  Qdrant, Milvus and Pinecone take sparse vectors.

All three keep the same entries in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

__all__ = [
    "SPARSE_FORMATS",
    "EncodingFormat",
    "SparseFormat",
    "format_sparse",
    "weight_dict",
]

SparseFormat = Literal["token_weights", "lexical_weights", "indices_values"]
SPARSE_FORMATS: tuple[SparseFormat, ...] = get_args(SparseFormat)
# How the dense and ColBERT vectors travel (_vectors.py reads and writes both).
EncodingFormat = Literal["float", "base64"]


def format_sparse(
    ids: Sequence[int],
    weights: Sequence[float],
    tokens: Sequence[str | None] | None,
    sparse_format: SparseFormat,
) -> Any:
    """One sequence's entries in the requested shape (plain lists and dicts)."""
    if sparse_format == "token_weights":
        if tokens is None:
            return [{"token_id": t, "weight": w, "token": None} for t, w in zip(ids, weights)]
        return [{"token_id": t, "weight": w, "token": s} for t, w, s in zip(ids, weights, tokens)]
    if sparse_format == "lexical_weights":
        return dict(zip(map(str, ids), weights))
    if sparse_format == "indices_values":
        return {"indices": list(ids), "values": list(weights)}
    raise ValueError(f"sparse_format must be one of {SPARSE_FORMATS}, got {sparse_format!r}")


def weight_dict(sparse: Any) -> dict[str, float]:
    """Any of the three shapes, or a response item holding one, as FlagEmbedding's dict.

    Keys are token ids as strings, in the entries' order. Accepts the plain
    JSON shapes as well as the package's pydantic models.
    """
    if hasattr(sparse, "sparse_embedding"):  # a SparseEmbeddingItem
        sparse = sparse.sparse_embedding
        if sparse is None:
            raise ValueError(
                "this item has no sparse embedding (it was asked for return_sparse=false)"
            )
    if hasattr(sparse, "indices") and hasattr(sparse, "values") and not isinstance(sparse, Mapping):
        sparse = {"indices": sparse.indices, "values": sparse.values}
    if isinstance(sparse, Mapping):
        if set(sparse) == {"indices", "values"}:
            indices, values = sparse["indices"], sparse["values"]
            if len(indices) != len(values):
                raise ValueError(
                    f"indices_values has {len(indices)} indices but {len(values)} values"
                )
            return {str(int(i)): v for i, v in zip(indices, values)}
        return {str(k): v for k, v in sparse.items()}
    if isinstance(sparse, Sequence) and not isinstance(sparse, (str, bytes)):
        return {str(int(entry["token_id"])): entry["weight"] for entry in sparse}
    raise TypeError(
        "expected token_weights (a list of {token_id, weight, token}), lexical_weights "
        f"(a dict of id -> weight) or indices_values, got {type(sparse).__name__}"
    )
