"""FlagEmbedding's compute_score, served: a /pooling (or LLM.encode) request
whose data holds a query and documents, or pairs, answered with compute_score's
five keys per pair; against real FlagEmbedding, on a real engine and server."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .support.parity import assert_scores_equal, flag_scores
from .support.requests import body, pooling, post
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

DOCS = [t for k, t in PARITY_TEXTS.items() if k not in EMPTY_BY_DESIGN] + [LONG_TEXT]
# Over the tiny model's 1024 positions: cut at the model's length, </s> kept.
LONGER_THAN_THE_MODEL = " ".join(
    f"passage {i} on rivers, mountains and the sky;" for i in range(160)
)


def scores_of(answer: dict) -> list[dict]:
    items = answer["data"]
    assert [item["index"] for item in items] == list(range(len(items)))
    assert {item["object"] for item in items} == {"score"}
    return [item["scores"] for item in items]


def test_a_query_against_documents_equals_compute_score(server, flag_model, tokenizer):
    query = "sparse and dense retrieval of documents"
    answer = pooling(server, {"query": query, "documents": DOCS})["data"]
    assert_scores_equal(
        scores_of(answer), flag_scores(flag_model, [(query, d) for d in DOCS]), "rerank"
    )
    # The query runs once, not once per document.
    tokens = sum(len(tokenizer(t)["input_ids"]) for t in [query, *DOCS])
    assert answer["usage"]["prompt_tokens"] == tokens


def test_pairs_with_weights_and_cuts_equal_compute_score(server, flag_model, tokenizer):
    pairs = [
        ("I love China", "hi, bge-m3"),
        (LONG_TEXT, "I love China"),  # a query cut at max_query_length
        ("I love China", LONG_TEXT),  # a passage cut at max_passage_length
        ("hi, bge-m3", "hi, bge-m3"),
        ("I love China", "hi, bge-m3"),  # the first pair again
        ("", "hi, bge-m3"),  # empty texts: <s></s>, as compute_score takes them
        ("I love China", ""),
    ]
    data = {
        "pairs": [list(p) for p in pairs],
        "weights": [0.4, 0.2, 0.4],
        "max_query_length": 24,
        "max_passage_length": 40,
    }
    answer = pooling(server, data)["data"]
    got = scores_of(answer)
    want = flag_scores(flag_model, pairs, [0.4, 0.2, 0.4], 24, 40)
    assert_scores_equal(got, want, "pairs")
    assert got[4] == got[0]

    # Each distinct query, and each distinct passage, ran once, with its own cut.
    def tokens(texts, cut):
        return sum(len(tokenizer(t, truncation=True, max_length=cut)["input_ids"]) for t in texts)

    queries, passages = {q for q, _ in pairs}, {p for _, p in pairs}
    assert answer["usage"]["prompt_tokens"] == tokens(queries, 24) + tokens(passages, 40)


def test_a_passage_longer_than_the_model_is_cut_at_the_models_length(server, flag_model):
    """No max_passage_length: the model's length (1024 here), as
    compute_score's default would be on this model; FlagEmbedding is asked
    for 1024 explicitly, since its default (8192) is past this model's table."""
    query = "rivers and mountains"
    docs = [LONGER_THAN_THE_MODEL, "the sky"]
    got = scores_of(pooling(server, {"query": query, "documents": docs})["data"])
    assert_scores_equal(
        got, flag_scores(flag_model, [(query, d) for d in docs], max_passage_length=1024), "cut"
    )
    # And a max_passage_length above it is held at it.
    data = {"query": query, "documents": docs, "max_passage_length": 8192}
    assert scores_of(pooling(server, data)["data"]) == got


def test_offline_llm_encode_scores_as_the_server(llm, flag_model):
    query = "sparse and dense retrieval of documents"
    (out,) = llm.encode({"data": {"query": query, "documents": DOCS}}, pooling_task="plugin")
    got = [item.scores for item in out.outputs.data]
    assert_scores_equal(got, flag_scores(flag_model, [(query, d) for d in DOCS]), "offline")
    pairs = [("hi, bge-m3", "I love China"), (LONG_TEXT, LONG_TEXT)]
    data = {"pairs": pairs, "weights": [1, 0, 2], "max_query_length": 16}
    (out,) = llm.encode({"data": data}, pooling_task="plugin")
    got = [item.scores for item in out.outputs.data]
    assert_scores_equal(got, flag_scores(flag_model, pairs, [1, 0, 2], 16), "offline pairs")


def test_concurrent_score_and_embedding_requests_keep_their_own_answers(server):
    """A burst of scoring requests (each query its own) among embedding
    requests: each answer equals the same request sent alone."""
    requests = []
    for k in range(12):
        if k % 3 == 2:
            requests.append({"input": DOCS[k % len(DOCS)], "return_colbert_vecs": True})
        else:
            requests.append({"query": f"query {k} about China", "documents": DOCS[k % 4 :]})
    alone = [pooling(server, data)["data"] for data in requests]

    async def burst():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(
                *(client.post(server.url + "/pooling", json=body(d)) for d in requests)
            )

    for k, (resp, want) in enumerate(zip(asyncio.run(burst()), alone)):
        assert resp.status_code == 200, resp.text
        got = resp.json()["data"]
        if "query" in requests[k]:
            assert_scores_equal(scores_of(got), scores_of(want), f"request {k}")
        else:
            assert got["usage"] == want["usage"], k
            assert len(got["data"][0]["colbert_vecs"]) == len(want["data"][0]["colbert_vecs"])


@pytest.mark.parametrize(
    "data,param,says",
    [
        ({"query": "q"}, "data.documents", "data.documents is missing"),
        ({"documents": ["d"]}, "data.query", "data.query is missing"),
        ({"query": "q", "documents": []}, "data.documents", "at least 1 item"),
        ({"query": "q", "documents": ["d", 7]}, "data.documents[1]", "valid string"),
        ({"query": "q", "documents": "d"}, "data.documents", "valid list"),
        ({"query": "q", "documents": ["d"], "pairs": [["q", "d"]]}, "data.query", "or pairs"),
        ({"pairs": [["q"]]}, "data.pairs[0][1]", "field required"),
        ({"pairs": [["q", "d", "e"]]}, "data.pairs[0]", "2 items"),
        ({"pairs": [["q", 3]]}, "data.pairs[0][1]", "valid string"),
        (
            {"query": "q", "documents": ["d"], "weights": [1, 1]},
            "data.weights[2]",
            "field required",
        ),
        (
            {"query": "q", "documents": ["d"], "weights": [1, -1, 1]},
            "data.weights[1]",
            "greater than or equal to 0",
        ),
        ({"query": "q", "documents": ["d"], "weights": [0, 0, 1]}, "data.weights", "above 0"),
        (
            {"query": "q", "documents": ["d"], "max_query_length": 0},
            "data.max_query_length",
            "greater than or equal to 1",
        ),
        (
            {"query": "q", "documents": ["d"], "max_passage_length": "8"},
            "data.max_passage_length",
            "integer",
        ),
        ({"query": "q", "documents": ["d"], "input": "x"}, "data.input", "not permitted"),
        (
            {"query": "q", "documents": [f"d{i}" for i in range(1024)]},
            "data.documents",
            "1025 items; at most 1024",
        ),
        # The same text again and again costs one run, but each pair its own
        # answer: the pairs and the documents are counted, not the distinct texts.
        ({"query": "q", "documents": ["d"] * 1025}, "data.documents", "1025 items; at most 1024"),
        ({"pairs": [["q", "d"]] * 1025}, "data.pairs", "1025 items; at most 1024"),
        (
            {"query": "q", "documents": ["d"], "weights": [1e308, 1e308, 1e308]},
            "data.weights",
            "sum must be a finite number",
        ),
    ],
)
def test_bad_score_requests_get_a_400_naming_the_field(server, data, param, says):
    resp = post(server, body(data))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param, error
    assert says in error["message"], error


def test_the_largest_accepted_pairs_are_answered_each(server):
    resp = post(server, body({"pairs": [["q", "d"]] * 1024}))
    assert resp.status_code == 200, resp.text
    scores = [item["scores"] for item in resp.json()["data"]["data"]]
    assert len(scores) == 1024 and all(s == scores[0] for s in scores)


def test_a_score_being_tokenized_leaves_the_event_loop_free(server):
    """A score's texts are tokenized by the plugin (each with its own cut):
    near the character limit that takes seconds. Meanwhile the server answers
    /health again and again, as it does only when that work runs off its
    event loop; held there, /health would wait for it, and the few answers
    that came after it would come before the score's."""
    documents = [f"passage {i} " + "rivers and mountains " * 3500 for i in range(100)]
    data = {"query": "q", "documents": documents, "max_passage_length": 8}
    assert sum(map(len, documents)) > 7_000_000  # near BGE_M3_SPARSE_MAX_CHARS's default
    healths = 0
    with httpx.Client(base_url=server.url, timeout=300) as client:
        scoring = ThreadPoolExecutor(1).submit(client.post, "/pooling", json=body(data))
        while not scoring.done():
            assert client.get("/health").status_code == 200
            healths += 1
        answer = scoring.result()
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["data"]["data"]) == 100
    assert healths >= 200, healths


# -- the ColBERT budget and the top-level fields of a score ---------------------


def test_a_scores_colbert_vectors_count_against_the_colbert_bound(server, tokenizer, model_dir):
    """A score's ColBERT vectors cross to the API server for the MaxSim: past
    BGE_M3_SPARSE_MAX_COLBERT_VALUES the score is refused before the model
    runs, naming data.documents and the count; the same texts scored without
    ColBERT (modes) make none and are answered."""
    from bge_m3_sparse_plugin._config import DEFAULT_MAX_COLBERT_VALUES

    hidden = json.loads((model_dir / "config.json").read_text())["hidden_size"]
    docs = [f"{i} " + "rivers and mountains under the sky " * 20 for i in range(400)]
    # The vectors each text makes: one per token but <s>, as compute_score's.
    vectors = sum(len(tokenizer(t)["input_ids"]) - 1 for t in ["q", *docs])
    assert vectors * hidden > DEFAULT_MAX_COLBERT_VALUES  # the case is past the bound
    refused = post(server, body({"query": "q", "documents": docs}))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "data.documents", error
    assert f"hold {vectors * hidden} values" in error["message"], error
    assert f"at most {DEFAULT_MAX_COLBERT_VALUES}" in error["message"], error
    answered = post(server, body({"query": "q", "documents": docs, "modes": ["sparse+dense"]}))
    assert answered.status_code == 200, answered.text
    assert len(answered.json()["data"]["data"]) == len(docs)


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"truncate_prompt_tokens": 4}, "truncate_prompt_tokens"),
        ({"truncation_side": "left"}, "truncation_side"),
        ({"padding": "max_length"}, "padding"),
        ({"encoding_format": "base64"}, "encoding_format"),
        ({"use_activation": False}, "use_activation"),
        ({"embed_task": "dense"}, "embed_task"),
    ],
)
def test_a_top_level_field_a_score_cannot_honour_is_refused_by_name(server, extra, param):
    """truncate_prompt_tokens on a score cut the plugin's own token ids to the
    first N and lost </s>: a wrong ColBERT score, answered 200. Refused now,
    as every top-level field that would change an answer or be dropped."""
    resp = post(server, {**body({"query": "q", "documents": ["a text", "another"]}), **extra})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param, error
    assert param in error["message"], error


def test_top_level_fields_that_change_no_answer_are_left_to_vllm(server):
    plain = post(server, body({"query": "q", "documents": ["a text"]}))
    assert plain.status_code == 200, plain.text
    same = post(
        server,
        {
            **body({"query": "q", "documents": ["a text"]}),
            "user": "u",
            "priority": 0,
            "cache_salt": "salt-1",
            "request_id": "score-fields-1",
            "truncation_side": "right",
            "padding": "do_not_pad",
        },
    )
    assert same.status_code == 200, same.text
    assert same.json()["data"] == plain.json()["data"]
