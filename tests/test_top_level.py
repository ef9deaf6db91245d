"""The rule for vLLM's top-level fields of a plugin request (serving/_top_level.py),
over every field and both kinds; tests/test_score_requests.py and
tests/test_online.py send them to a real server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bge_m3_sparse_plugin.serving._top_level import LEFT_TO_VLLM, refusal

SCORE = {"query": "q", "documents": ["d"]}
EMBED = {"input": ["a text"]}
# vLLM 0.32's IOProcessorRequest fields, with their defaults (read in
# vllm/entrypoints/pooling/base/protocol.py), and what is refused, per kind.
DEFAULTS = {
    "data": None,
    "model": None,
    "user": None,
    "truncate_prompt_tokens": None,
    "padding": None,
    "truncation_side": None,
    "request_id": "abc",
    "priority": 0,
    "mm_processor_kwargs": None,
    "cache_salt": None,
    "encoding_format": "float",
    "embed_dtype": "float32",
    "endianness": "native",
    "task": "plugin",
}


def test_vllms_defaults_are_accepted_on_both_kinds():
    assert refusal(DEFAULTS, SCORE) is None
    assert refusal(DEFAULTS, EMBED) is None


def test_truncate_prompt_tokens_is_honoured_on_embeddings_and_refused_on_scores():
    fields = {**DEFAULTS, "truncate_prompt_tokens": 8}
    assert refusal(fields, EMBED) is None
    message, field = refusal(fields, SCORE)
    assert field == "truncate_prompt_tokens"
    assert "max_query_length" in message and "max_passage_length" in message


@given(
    data=st.sampled_from([SCORE, EMBED]),
    name=st.sampled_from(sorted(LEFT_TO_VLLM - {"data"})),
    value=st.none() | st.integers() | st.text(max_size=8),
)
def test_fields_that_change_no_answer_are_never_refused(data, name, value):
    assert refusal({**DEFAULTS, name: value}, data) is None


@given(
    data=st.sampled_from([SCORE, EMBED]),
    name=st.text(alphabet="abcdefghij_", min_size=1, max_size=12).filter(
        lambda n: n not in DEFAULTS
    ),
    value=st.none() | st.booleans() | st.integers() | st.text(max_size=8),
)
def test_a_field_vllm_would_ignore_is_refused_by_name(data, name, value):
    found = refusal({**DEFAULTS, name: value}, data)
    assert found is not None and found[1] == name and found[0].startswith(f"{name}: ")


@given(
    data=st.sampled_from([SCORE, EMBED]),
    change=st.sampled_from(
        [
            ("truncation_side", "left"),
            ("padding", "max_length"),
            ("encoding_format", "base64"),
            ("encoding_format", "bytes"),
            ("embed_dtype", "float16"),
            ("endianness", "big"),
            ("mm_processor_kwargs", {"x": 1}),
            ("dimensions", 64),
        ]
    ),
)
def test_a_field_that_would_change_the_answer_is_refused_on_both_kinds(data, change):
    name, value = change
    found = refusal({**DEFAULTS, name: value}, data)
    assert found is not None and found[1] == name and repr(value) in found[0]


def test_a_body_without_data_is_refused_naming_data():
    """vLLM parses {"input": "x", "task": "plugin"} as another pooling request
    and sends it to the plugin's path, where it answered an empty 500."""
    fields = {k: v for k, v in DEFAULTS.items() if k != "data"}
    message, field = refusal({**fields, "input": "x"}, None)
    assert field == "data" and "not in input" in message
