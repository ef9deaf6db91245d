"""How far one run of bge-m3's three outputs is from another: the measures of
the half-precision criterion (tests/support/parity.py holds its bounds).

Pure numpy over FlagEmbedding's own shapes (``lexical_weights`` as dicts of
str token id -> weight, ``dense_vecs`` rows, ``colbert_vecs`` one matrix a
text), so the tests, benchmarks/bench_precision.py and benchmarks/gpu.sh
measure the same thing on the plugin's answers and on FlagEmbedding's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .parity import NEAR_ZERO_SHARE

TOP_K = 10


@dataclass(frozen=True)
class Drift:
    """One run against a reference run of the same texts."""

    median_rel: float  # median relative error of the weights both hold, near-zero ones left out
    max_rel: float  # the largest of those
    top_k: float  # the smallest share, over the texts, of the reference's top-10 tokens kept
    set_changes: int  # texts whose token sets differ
    changed_share: float  # largest weight that one side has and the other lacks, / text's largest
    dense_cos: float  # the smallest cosine between the two dense vectors of a text
    colbert_cos: float  # the smallest cosine between two ColBERT vectors of a token


def _weights(d: dict[str, float]) -> dict[int, float]:
    return {int(k): float(v) for k, v in d.items()}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def drift(reference: dict[str, Any], run: dict[str, Any]) -> Drift:
    """``run`` against ``reference`` (each FlagEmbedding's encode output, of
    the same texts, with all three outputs)."""
    rel: list[float] = []
    top: list[float] = []
    set_changes, changed = 0, 0.0
    for want_raw, got_raw in zip(reference["lexical_weights"], run["lexical_weights"], strict=True):
        want, got = _weights(want_raw), _weights(got_raw)
        largest = max([*want.values(), *got.values(), 0.0])
        if set(want) != set(got):
            set_changes += 1
            alone = [want.get(k, 0.0) + got.get(k, 0.0) for k in set(want) ^ set(got)]
            changed = max(changed, max(alone) / largest)
        floor = NEAR_ZERO_SHARE * largest
        rel += [abs(got[k] - w) / w for k, w in want.items() if k in got and w >= floor]
        best = sorted(want, key=lambda k: -want[k])[:TOP_K]
        if best:
            mine = set(sorted(got, key=lambda k: -got[k])[:TOP_K])
            top.append(len(mine.intersection(best)) / len(best))
    dense = _cosines(reference["dense_vecs"], run["dense_vecs"])
    colbert = [  # a run without ColBERT vectors (the index command's) compares none
        _cosines(a, b).min()
        for a, b in zip(reference["colbert_vecs"], run.get("colbert_vecs") or [], strict=False)
        if len(a)
    ]
    values = np.asarray(rel) if rel else np.zeros(1)
    return Drift(
        median_rel=float(np.median(values)),
        max_rel=float(values.max()),
        top_k=float(min(top, default=1.0)),
        set_changes=set_changes,
        changed_share=float(changed),
        dense_cos=float(dense.min()),
        colbert_cos=float(min(colbert, default=1.0)),
    )


def score_drift(reference: list[dict[str, float]], run: list[dict[str, float]]) -> float:
    """The largest difference of any of compute_score's five keys, over the pairs."""
    return max(abs(g[key] - w[key]) for w, g in zip(reference, run, strict=True) for key in w)


def share_representable(values: np.ndarray, dtype: str) -> float:
    """The share of ``values`` (float32) that ``dtype`` holds exactly: about 0
    for outputs computed at float32 from half-precision hidden states, 1 for
    outputs computed at half precision (a head at the model's dtype)."""
    values = np.asarray(values, np.float32).ravel()
    values = values[values != 0]
    if dtype == "float16":
        exact = values.astype(np.float16).astype(np.float32) == values
    elif dtype == "bfloat16":  # bfloat16 is float32 with the low 16 bits zero
        exact = (values.view(np.uint32) & 0xFFFF) == 0
    else:
        raise ValueError(f"not a half precision: {dtype!r}")
    return float(exact.mean()) if values.size else 0.0


def flag_at(model_dir: Any, dtype: str, device: str = "cpu") -> Any:
    """FlagEmbedding's BGEM3FlagModel at ``dtype``, as its own ``use_fp16`` /
    ``use_bf16`` load it (the encoder and both heads at that dtype). On the
    device "cpu" its encode casts the model back to float32, so half
    precision on the CPU runs on "cpu:0", the same device by another name."""
    from FlagEmbedding import BGEM3FlagModel

    half = dtype != "float32"
    return BGEM3FlagModel(
        str(model_dir),
        use_fp16=dtype == "float16",
        use_bf16=dtype == "bfloat16",
        devices="cpu:0" if half and device == "cpu" else device,
    )


def plugin_as_flag(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The plugin's items (token_weights, dense and ColBERT as lists) in
    FlagEmbedding's encode shapes."""
    return {
        "lexical_weights": [
            {str(e["token_id"]): e["weight"] for e in item["sparse_embedding"]} for item in items
        ],
        "dense_vecs": np.asarray([item["dense_embedding"] for item in items], np.float32),
        "colbert_vecs": [
            np.asarray(item["colbert_vecs"], np.float32).reshape(-1, len(item["dense_embedding"]))
            for item in items
        ],
    }
