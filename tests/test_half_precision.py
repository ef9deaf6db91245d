"""The plugin at half precision (float16, bfloat16: what vLLM's dtype="auto"
runs bge-m3 at), offline and online, against real FlagEmbedding at float32
and at the same precision: all three outputs and compute_score's five keys.

The criterion (tests/support/parity.py): the plugin is no further from
FlagEmbedding at float32 than FlagEmbedding itself is at that precision.
Each run's engine or server starts, answers every request the tests compare,
and stops, so that one half-precision engine runs at a time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from .support.drift import drift, flag_at, plugin_as_flag, score_drift, share_representable
from .support.parity import (
    DRIFT_RATIO,
    HALF_PRECISIONS,
    HEAD_EXACT_SHARE,
    MAX_DRIFT_RATIO,
    NEAR_ZERO_SHARE,
    TOP_K_SLACK,
    flag_all,
    flag_scores,
)
from .support.requests import pooling
from .support.server import Server
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS, generated_texts

pytestmark = pytest.mark.engine

TEXTS = [t for k, t in PARITY_TEXTS.items() if k not in EMPTY_BY_DESIGN]
TEXTS += [LONG_TEXT, *generated_texts(24, 90, seed=40)]
QUERY = "sparse and dense retrieval of documents in many languages"
DOCS = TEXTS[:12]
ALL_THREE = {"input": TEXTS, "return_dense": True, "return_colbert_vecs": True}
SCORE = {"query": QUERY, "documents": DOCS}


def _offline(model_dir, dtype: str) -> tuple[list[dict], list[dict]]:
    from vllm import LLM

    from bge_m3_sparse_plugin._config import engine_kwargs

    llm = LLM(model=str(model_dir), **engine_kwargs(gpu=False, dtype=dtype, max_model_len=1024))
    try:
        (items,) = llm.encode({"data": ALL_THREE}, pooling_task="plugin")
        (scores,) = llm.encode({"data": SCORE}, pooling_task="plugin")
        return (
            items.outputs.model_dump()["data"],
            [item.scores for item in scores.outputs.data],
        )
    finally:
        llm.llm_engine.engine_core.shutdown()


def _online(model_dir, dtype: str, log_dir) -> tuple[list[dict], list[dict]]:
    server = Server(model_dir, log_dir / f"server-{dtype}.log", ["--dtype", dtype])
    try:
        server.wait_ready()
        items = pooling(server, ALL_THREE)["data"]["data"]
        scores = [item["scores"] for item in pooling(server, SCORE)["data"]["data"]]
        return items, scores
    finally:
        server.stop()


@pytest.fixture(scope="module")
def flag_fp32(flag_model) -> dict[str, Any]:
    return {
        "encode": flag_all(flag_model, TEXTS),
        "scores": flag_scores(flag_model, [(QUERY, d) for d in DOCS]),
    }


@pytest.fixture(scope="module", params=HALF_PRECISIONS)
def dtype(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def flag_half(model_dir, dtype) -> dict[str, Any]:
    model = flag_at(model_dir, dtype)
    return {
        "dtype": dtype,
        "encode": flag_all(model, TEXTS),
        "scores": flag_scores(model, [(QUERY, d) for d in DOCS]),
    }


@pytest.fixture(scope="module", params=["offline", "online"])
def plugin_half(request, model_dir, dtype, tmp_path_factory) -> dict[str, Any]:
    if request.param == "offline":
        items, scores = _offline(model_dir, dtype)
    else:
        items, scores = _online(model_dir, dtype, tmp_path_factory.mktemp("logs"))
    return {"dtype": dtype, "way": request.param, "items": items, "scores": scores}


@pytest.fixture
def pair(flag_half, plugin_half):
    """FlagEmbedding and the plugin at the same precision."""
    return flag_half, plugin_half


def test_sparse_dense_and_colbert_drift_no_more_than_flagembedding(pair, flag_fp32):
    flag, plugin = pair
    theirs = drift(flag_fp32["encode"], flag["encode"])
    ours = drift(flag_fp32["encode"], plugin_as_flag(plugin["items"]))
    where = f"{plugin['dtype']} {plugin['way']}: plugin {ours}, FlagEmbedding {theirs}"
    assert theirs.median_rel > 0, f"FlagEmbedding did not run at half precision: {where}"
    assert ours.median_rel <= DRIFT_RATIO * theirs.median_rel, where
    assert ours.max_rel <= MAX_DRIFT_RATIO * theirs.max_rel, where
    assert ours.top_k >= theirs.top_k - TOP_K_SLACK, where
    assert ours.changed_share <= NEAR_ZERO_SHARE, where  # a token set changes only near zero
    assert 1 - ours.dense_cos <= MAX_DRIFT_RATIO * (1 - theirs.dense_cos), where
    assert 1 - ours.colbert_cos <= MAX_DRIFT_RATIO * (1 - theirs.colbert_cos), where


def test_compute_scores_drift_no_more_than_flagembedding(pair, flag_fp32):
    flag, plugin = pair
    assert [list(s) for s in plugin["scores"]] == [list(s) for s in flag_fp32["scores"]]
    theirs = score_drift(flag_fp32["scores"], flag["scores"])
    ours = score_drift(flag_fp32["scores"], plugin["scores"])
    where = f"{plugin['dtype']} {plugin['way']}: plugin {ours}, FlagEmbedding {theirs}"
    assert theirs > 0, where
    assert ours <= MAX_DRIFT_RATIO * theirs, where


def test_heads_run_at_float32(plugin_half):
    """The weights, dense vectors and ColBERT vectors are computed at
    float32 from the half-precision hidden states: few of them are values the
    half precision holds (a head at the model's dtype makes every one so)."""
    dtype, items = plugin_half["dtype"], plugin_half["items"]
    outputs = {
        "sparse": np.asarray([e["weight"] for i in items for e in i["sparse_embedding"]]),
        "dense": np.asarray([i["dense_embedding"] for i in items]),
        "colbert": np.concatenate([np.asarray(i["colbert_vecs"]).ravel() for i in items]),
    }
    shares = {name: share_representable(values, dtype) for name, values in outputs.items()}
    assert all(values.size > 1000 for values in outputs.values())
    assert all(share <= HEAD_EXACT_SHARE for share in shares.values()), (dtype, shares)


def test_flagembedding_at_half_precision_is_what_it_says(flag_half):
    """The yardstick itself: FlagEmbedding ran at the precision named (its
    dense vectors are that precision's values), so the comparison above is
    with FlagEmbedding at half precision and not at float32."""
    dense = np.asarray(flag_half["encode"]["dense_vecs"], np.float32)
    assert share_representable(dense, flag_half["dtype"]) == 1.0
