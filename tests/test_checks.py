"""The request-side checks, tasks and prompts (_checks.py, _tasks.py, _prompts.py), without vLLM: each refusal
names its field and says what to do; good requests become vLLM's prompts."""

from __future__ import annotations

import pytest

from bge_m3_sparse_plugin import RequestError
from bge_m3_sparse_plugin._checks import (
    check_colbert_values,
    check_counts,
    check_lengths,
    check_limits,
)
from bge_m3_sparse_plugin._prompts import prompts_for
from bge_m3_sparse_plugin._tasks import Wants, tasks_for

ONE_PASS = "embed&token_classify&token_embed"  # the plugin's own task


def refusal(check, *args) -> tuple[str, str]:
    with pytest.raises(RequestError) as info:
        check(*args)
    return info.value.field, info.value.message


def test_prompts_keep_texts_as_text_and_ids_as_ids():
    assert prompts_for(["a b", "c"], False, 10) == [{"prompt": "a b"}, {"prompt": "c"}]
    assert prompts_for([[0, 9, 2]], True, 10) == [{"prompt_token_ids": [0, 9, 2]}]


def test_ids_outside_the_vocabulary_are_refused_naming_the_item():
    assert refusal(prompts_for, [[0, 10, 2]], True, 10) == (
        "data.input",
        "data.input holds token id 10, outside the vocabulary [0, 10)",
    )
    assert refusal(prompts_for, [[0, 1], [0, 3, 12]], False, 10) == (
        "data.input",
        "data.input[1] holds token id 12, outside the vocabulary [0, 10)",
    )


def test_limits_count_items_and_characters():
    check_limits(["ab", "cd", [5, 6, 7]], 3, 4)  # ids count no characters
    assert refusal(check_limits, ["a"] * 4, 3, 100) == (
        "data.input",
        "data.input has 4 items; at most 3 are allowed per request "
        "(set BGE_M3_SPARSE_MAX_INPUTS on the server to change it)",
    )
    assert refusal(check_limits, ["abc", "de"], 3, 4) == (
        "data.input",
        "data.input holds 5 characters of text; at most 4 are allowed per request "
        "(split the request, or set BGE_M3_SPARSE_MAX_CHARS on the server to change it)",
    )


def test_lengths_name_the_first_prompt_over_the_limit():
    check_lengths([8, 8], False, 8)
    field, message = refusal(check_lengths, [3, 9, 10], False, 8)
    assert (field, message) == (
        "data.input",
        "data.input[1] has 9 tokens, special tokens included; this model takes at most 8. "
        "Shorten it, or send truncate_prompt_tokens <= 8",
    )
    assert refusal(check_lengths, [9], True, 8)[1].startswith("data.input has 9 tokens")


def test_a_request_asking_for_nothing_is_refused_by_name():
    assert refusal(tasks_for, Wants(False, False, False), True) == (
        "data.return_sparse",
        "data.return_sparse, data.return_dense and data.return_colbert_vecs are all false; "
        "ask for at least one",
    )


@pytest.mark.parametrize(
    "wants,two_pass,one_pass",
    [
        (Wants(True, False, False), ("embed&token_classify",), ("embed&token_classify",)),
        (Wants(False, True, False), ("embed&token_classify",), ("embed&token_classify",)),
        (Wants(True, True, False), ("embed&token_classify",), ("embed&token_classify",)),
        (Wants(False, False, True), ("token_embed",), ("token_embed",)),
        # ColBERT beside sparse or dense: on vLLM's model each input runs
        # twice, sparse and dense first; on the plugin's, once for all three.
        (Wants(True, False, True), ("embed&token_classify", "token_embed"), (ONE_PASS,)),
        (Wants(False, True, True), ("embed&token_classify", "token_embed"), (ONE_PASS,)),
        (Wants(True, True, True), ("embed&token_classify", "token_embed"), (ONE_PASS,)),
    ],
)
def test_each_request_gets_the_tasks_that_give_what_it_asks(wants, two_pass, one_pass):
    assert tasks_for(wants, one_pass=False) == two_pass
    assert tasks_for(wants, one_pass=True) == one_pass


@pytest.mark.parametrize("name", ["pairs", "documents", "input"])
def test_lists_that_count_texts_are_bounded_before_parsing(name):
    """Counted in the raw data, before pydantic parses a million items; the
    same item again and again counts each time."""
    check_counts({name: [["q", "d"]] * 4}, 4)
    assert refusal(check_counts, {name: [["q", "d"]] * 5}, 4) == (
        f"data.{name}",
        f"data.{name} has 5 items; at most 4 are allowed per request "
        "(set BGE_M3_SPARSE_MAX_INPUTS on the server to change it)",
    )


def test_one_token_id_list_is_one_input_however_long():
    check_counts({"input": list(range(10))}, 4)
    check_counts({"input": "x" * 10, "query": "q" * 10}, 4)


def test_colbert_vectors_are_bounded_by_their_values():
    check_colbert_values(12, 12)
    assert refusal(check_colbert_values, 13, 12) == (
        "data.return_colbert_vecs",
        "data.return_colbert_vecs: the ColBERT vectors of this request hold 13 values "
        "(tokens x hidden size); at most 12 are allowed per request (send fewer or shorter "
        "texts, or set BGE_M3_SPARSE_MAX_COLBERT_VALUES on the server)",
    )
    # The same budget for a score's ColBERT vectors, named by what holds the texts.
    assert refusal(check_colbert_values, 13, 12, "data.documents") == (
        "data.documents",
        "data.documents: the ColBERT vectors of this request hold 13 values (tokens x "
        "hidden size) to score with; at most 12 are allowed per request (give modes without "
        "colbert, send fewer or shorter texts, or set BGE_M3_SPARSE_MAX_COLBERT_VALUES on "
        "the server)",
    )
