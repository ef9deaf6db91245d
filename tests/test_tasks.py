"""One server (and one offline engine) answers sparse, dense and ColBERT, each
request from the pooler that gives what it asks: the plugin picks the pooling
task per request, whatever task the server was started with, and runs each
input twice for ColBERT beside sparse or dense. Every output against real
FlagEmbedding."""

from __future__ import annotations

import itertools
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from .support.parity import FLAGS, assert_items_equal_flag, flag_all
from .support.requests import pooling
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

TEXTS = [t for k, t in PARITY_TEXTS.items() if k not in EMPTY_BY_DESIGN] + [LONG_TEXT]
# Every combination that asks for something: sparse, dense, ColBERT, and mixes.
ASKS = [dict(zip(FLAGS, bits)) for bits in itertools.product([False, True], repeat=3) if any(bits)]


@pytest.fixture(scope="module")
def flag(flag_model) -> dict:
    return flag_all(flag_model, TEXTS)


def subset(flag: dict, picks: list[int]) -> dict:
    return {
        key: [flag[key][i] for i in picks]
        for key in ("lexical_weights", "dense_vecs", "colbert_vecs")
    }


def test_one_request_for_all_three_equals_flagembedding(server, flag):
    data = {"input": TEXTS, "return_dense": True, "return_colbert_vecs": True}
    body = pooling(server, data)
    assert_items_equal_flag(body["data"]["data"], data, flag, "all three")
    # Usage counts each input's tokens once, though it ran twice.
    once = pooling(server, {"input": TEXTS})["data"]["usage"]
    assert body["data"]["usage"] == once


def test_a_burst_of_mixed_requests_each_equals_flagembedding(server, flag):
    """32 requests at once, each a random mix of the three and of the texts:
    the engine batches prompts of different tasks together, and no output
    crosses to another prompt, task or request."""
    rng = random.Random(7)
    requests = []
    for _ in range(32):
        picks = rng.sample(range(len(TEXTS)), rng.randint(1, 4))
        requests.append((picks, {"input": [TEXTS[i] for i in picks], **rng.choice(ASKS)}))
    with ThreadPoolExecutor(16) as pool:
        bodies = list(pool.map(lambda r: pooling(server, r[1]), requests))
    for (picks, data), body in zip(requests, bodies):
        assert_items_equal_flag(body["data"]["data"], data, subset(flag, picks), str(data))


@pytest.mark.parametrize("asks", ASKS, ids=lambda a: "+".join(k[7:] for k, v in a.items() if v))
def test_offline_each_mix_equals_flagembedding(llm, flag, asks):
    data = {"input": TEXTS, **asks}
    (out,) = llm.encode({"data": data}, pooling_task="plugin")
    assert_items_equal_flag(out.outputs.model_dump()["data"], data, flag, str(asks))


def test_the_token_embed_server_of_before_answers_all_three(colbert_server, flag):
    """A server started with --pooler-config '{"task": "token_embed"}', the
    ColBERT server this project asked for before, keeps working and now
    answers sparse and dense too."""
    data = {"input": TEXTS, "return_dense": True, "return_colbert_vecs": True}
    body = pooling(colbert_server, data)
    assert_items_equal_flag(body["data"]["data"], data, flag, "token_embed server")
