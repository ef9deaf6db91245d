"""The offline LLM.encode path, on a real vLLM engine, against real FlagEmbedding."""

from __future__ import annotations

import pytest

from .support.parity import assert_dense_equal, assert_sparse_equal, flag_reference
from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

pytestmark = pytest.mark.engine

CASES = {**PARITY_TEXTS, "over_512_tokens": LONG_TEXT}


def encode(llm, data: dict) -> dict:
    outputs = llm.encode({"data": data}, pooling_task="plugin")
    assert len(outputs) == 1
    return outputs[0].outputs.model_dump()


@pytest.fixture(scope="module")
def flag_out(flag_model):
    return flag_reference(flag_model, list(CASES.values()))


@pytest.fixture(scope="module")
def plugin_out(llm):
    return encode(llm, {"input": list(CASES.values()), "return_tokens": True, "return_dense": True})


@pytest.mark.parametrize("case", list(CASES))
def test_sparse_and_dense_equal_flagembedding(case, plugin_out, flag_out):
    i = list(CASES).index(case)
    item = plugin_out["data"][i]
    assert item["index"] == i
    assert item["object"] == "sparse-embedding"
    assert_sparse_equal(
        item["sparse_embedding"],
        flag_out["lexical_weights"][i],
        case,
        may_be_empty=case in EMPTY_BY_DESIGN,
    )
    assert_dense_equal(item["dense_embedding"], flag_out["dense_vecs"][i], case)


def test_token_strings_are_flagembeddings(plugin_out, flag_model, flag_out):
    for i, case in enumerate(CASES):
        want = [flag_model.tokenizer.decode([int(k)]) for k in flag_out["lexical_weights"][i]]
        got = [e["token"] for e in plugin_out["data"][i]["sparse_embedding"]]
        assert got == want, case


def test_seed_example_tokens(plugin_out):
    # The seed's second input decodes like bge-m3's: 'b', 'ge', '-', 'm', '3'
    # among the kept entries (which ones are kept depends on the weights).
    strings = [e["token"] for e in plugin_out["data"][1]["sparse_embedding"]]
    assert set(strings) <= {"hi", ",", "b", "ge", "-", "m", "3"}


def test_parity_is_not_vacuous(plugin_out, tokenizer):
    """A good share of tokens must be kept, or the comparisons above prove little."""
    kept = sum(len(item["sparse_embedding"]) for item in plugin_out["data"])
    distinct = sum(len(set(tokenizer(text)["input_ids"]) - {0, 1, 2, 3}) for text in CASES.values())
    assert kept >= 0.3 * distinct, (kept, distinct)


def test_usage_counts_every_prompt_token(plugin_out, tokenizer):
    total = sum(len(tokenizer(text)["input_ids"]) for text in CASES.values())
    assert plugin_out["usage"] == {
        "prompt_tokens": total,
        "total_tokens": total,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }


def test_single_string_without_tokens(llm, flag_model):
    out = encode(llm, {"input": "I love China"})
    flag = flag_reference(flag_model, ["I love China"])
    assert len(out["data"]) == 1
    item = out["data"][0]
    assert set(item) == {"index", "object", "sparse_embedding"}
    assert item["sparse_embedding"] and all(e["token"] is None for e in item["sparse_embedding"])
    assert_sparse_equal(item["sparse_embedding"], flag["lexical_weights"][0], "single")


def test_pre_tokenized_input_equals_text_input(llm, tokenizer):
    texts = [PARITY_TEXTS["english_sentence"], PARITY_TEXTS["literal_eos_bos"]]
    ids = [tokenizer(t)["input_ids"] for t in texts]
    by_text = encode(llm, {"input": texts, "return_tokens": True})
    by_ids = encode(llm, {"input": ids, "return_tokens": True})
    assert by_ids == by_text
    one = encode(llm, {"input": ids[0], "return_tokens": True})
    assert one["data"] == by_text["data"][:1]


def test_dense_only(llm, flag_model):
    out = encode(llm, {"input": ["I love China"], "return_sparse": False, "return_dense": True})
    item = out["data"][0]
    assert set(item) == {"index", "object", "dense_embedding"}
    assert_dense_equal(
        item["dense_embedding"],
        flag_reference(flag_model, ["I love China"])["dense_vecs"][0],
        "dense",
    )


def test_bad_input_raises_and_next_call_is_clean(llm, flag_model):
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=r"data\.input\[1\] must be a string"):
        encode(llm, {"input": ["fine", 3], "return_tokens": True})
    with pytest.raises(VLLMValidationError, match=r"maximum context length is 1024 tokens"):
        encode(llm, {"input": "x " * 1023, "return_dense": True})
    # A failed call leaves nothing that changes the next one's options.
    out = encode(llm, {"input": ["I love China"]})
    assert set(out["data"][0]) == {"index", "object", "sparse_embedding"}
    assert out["data"][0]["sparse_embedding"] and all(
        e["token"] is None for e in out["data"][0]["sparse_embedding"]
    )
