"""What vLLM is given for a request: its prompts, and for a score the
distinct texts, cut as FlagEmbedding cuts them. Pure: no vLLM.

Three places turn text into token ids, each for a reason of its own, and
each cuts as FlagEmbedding's ``max_length`` does (``<s>`` and ``</s>`` kept):

- an embedding request's texts go to vLLM as text (:func:`prompts_for`), and
  vLLM tokenizes them, so that the request's own ``truncate_prompt_tokens``
  applies as vLLM documents it;
- a score's texts are tokenized by the plugin (:func:`tokenize`, from the
  processor), because ``compute_score`` cuts queries and passages at two
  different lengths, and vLLM applies one cut to a whole request;
- the index command tokenizes its batches itself (:func:`tokenize`, from
  ``index/_engine.py``), so that a text over the model's length is found and
  reported alone instead of failing its whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ._checks import item_field
from ._config import DEFAULT_MAX_QUERY_LENGTH
from ._exceptions import RequestError

__all__ = ["ScorePlan", "TextPrompt", "TokensPrompt", "prompts_for", "score_plan", "tokenize"]


class TextPrompt(TypedDict):
    prompt: str


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]


def prompts_for(
    inputs: Sequence[str | list[int]], single: bool, vocab_size: int
) -> list[TextPrompt | TokensPrompt]:
    """vLLM's prompts: texts as text (vLLM tokenizes them, so that a request's
    ``truncate_prompt_tokens`` keeps ``</s>`` as FlagEmbedding's ``max_length``
    does), id lists as ids, each inside the vocabulary."""
    prompts: list[TextPrompt | TokensPrompt] = []
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            prompts.append({"prompt": item})
            continue
        top = max(item)
        if top >= vocab_size:
            raise RequestError(
                f"{item_field(i, single)} holds token id {top}, outside the "
                f"vocabulary [0, {vocab_size})",
                "data.input",
            )
        prompts.append({"prompt_token_ids": list(item)})
    return prompts


def tokenize(tokenizer: Any, texts: Sequence[str], cut: int | None) -> list[list[int]]:
    """Each text's token ids with the special tokens, cut at ``cut`` tokens
    (None: not cut) with ``<s>`` and ``</s>`` kept, as FlagEmbedding's
    ``max_length`` cuts them."""
    if cut is None:
        encoded = tokenizer(list(texts), add_special_tokens=True)
    else:
        encoded = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=cut)
    return [list(ids) for ids in encoded["input_ids"]]


@dataclass(frozen=True)
class ScorePlan:
    """What a scoring request runs: each distinct query and passage once,
    the queries first, and the pairs as indices into them."""

    queries: list[str]
    passages: list[str]
    pairs: list[tuple[int, int]]  # (index into queries, index into passages)
    query_cut: int  # tokens, </s> kept, as compute_score's max_query_length
    passage_cut: int  # as its max_passage_length


def score_plan(
    pairs: Sequence[tuple[str, str]],
    max_query_length: int | None,
    max_passage_length: int | None,
    max_tokens: int,
) -> ScorePlan:
    """Each distinct text once (a rerank request's query runs once, not once
    per document), and the cuts: the query's ``max_query_length`` (by default
    ``DEFAULT_MAX_QUERY_LENGTH``, FlagEmbedding's) and the passages'
    ``max_passage_length`` (by default the model's length), neither beyond
    the model's ``max_tokens``."""
    queries: dict[str, int] = {}
    passages: dict[str, int] = {}
    indices = [
        (queries.setdefault(q, len(queries)), passages.setdefault(p, len(passages)))
        for q, p in pairs
    ]
    return ScorePlan(
        queries=list(queries),
        passages=list(passages),
        pairs=indices,
        query_cut=min(max_query_length or DEFAULT_MAX_QUERY_LENGTH, max_tokens),
        passage_cut=min(max_passage_length or max_tokens, max_tokens),
    )
