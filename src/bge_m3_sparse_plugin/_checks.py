"""What a parsed request must satisfy before and after vLLM runs it, and the
prompts it becomes. Pure functions, no vLLM: the processor turns a
:class:`RequestError` into vLLM's 400 that names ``field``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from ._config import DEFAULT_MAX_QUERY_LENGTH, MAX_CHARS_ENV, MAX_INPUTS_ENV

__all__ = [
    "COLBERT_TASK",
    "DEFAULT_TASK",
    "GIVES_COLBERT",
    "GIVES_DENSE",
    "GIVES_SPARSE",
    "RequestError",
    "ScorePlan",
    "Wants",
    "check_lengths",
    "check_limits",
    "item_field",
    "max_tokens",
    "positions",
    "prompts_for",
    "score_plan",
    "tasks_for",
]

# What each pooling task of BgeM3EmbeddingModel puts into an output's data.
GIVES_SPARSE = frozenset({"embed&token_classify", "token_classify"})
GIVES_DENSE = frozenset({"embed&token_classify", "embed"})
GIVES_COLBERT = frozenset({"token_embed"})
DEFAULT_TASK = "embed&token_classify"  # sparse and dense, in one pass
COLBERT_TASK = "token_embed"
SCORE_TASKS = (DEFAULT_TASK, COLBERT_TASK)  # a score needs all three outputs


class RequestError(ValueError):
    """A request the plugin refuses: a 400 whose ``param`` is ``field``."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Wants:
    """What a request asks for, as the task check needs it."""

    sparse: bool
    dense: bool
    colbert: bool


class TextPrompt(TypedDict):
    prompt: str


class TokensPrompt(TypedDict):
    prompt_token_ids: list[int]


def item_field(index: int, single: bool) -> str:
    """How errors name input ``index``: ``data.input`` for a single input."""
    return "data.input" if single else f"data.input[{index}]"


def tasks_for(wants: Wants) -> tuple[str, ...]:
    """The pooling tasks that give what the request asks for, in the order
    its prompts run them: each input runs once per task.

    vLLM accepts any of the model's pooling tasks on each prompt, whatever
    task the server was started with, so one server answers every request:
    sparse and dense come from one task, ColBERT vectors from another.
    """
    if not (wants.sparse or wants.dense or wants.colbert):
        raise RequestError(
            "data.return_sparse, data.return_dense and data.return_colbert_vecs are "
            "all false; ask for at least one",
            "data.return_sparse",
        )
    return (DEFAULT_TASK,) * (wants.sparse or wants.dense) + (COLBERT_TASK,) * wants.colbert


def check_limits(
    inputs: Sequence[str | list[int]], max_inputs: int, max_chars: int, field: str = "data.input"
) -> None:
    """At most ``max_inputs`` inputs and ``max_chars`` characters of text;
    ``field`` is what the request calls them."""
    if len(inputs) > max_inputs:
        raise RequestError(
            f"{field} has {len(inputs)} items; at most {max_inputs} are "
            f"allowed per request (set {MAX_INPUTS_ENV} on the server to change it)",
            field,
        )
    chars = sum(len(item) for item in inputs if isinstance(item, str))
    if chars > max_chars:
        raise RequestError(
            f"{field} holds {chars} characters of text; at most {max_chars} are "
            f"allowed per request (split the request, or set {MAX_CHARS_ENV} on the "
            "server to change it)",
            field,
        )


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


def check_lengths(token_counts: Sequence[int], single: bool, max_tokens: int) -> None:
    """Each prompt, as vLLM tokenized it, fits the model's positions."""
    for i, n in enumerate(token_counts):
        if n > max_tokens:
            raise RequestError(
                f"{item_field(i, single)} has {n} tokens, special tokens "
                f"included; this model takes at most {max_tokens}. Shorten it, "
                f"or send truncate_prompt_tokens <= {max_tokens}",
                "data.input",
            )


def positions(config: dict[str, Any]) -> int | None:
    """How many token positions an (XLM-)RoBERTa config has, or None for another model.

    (XLM-)RoBERTa numbers positions from ``pad_token_id + 1``, so it has
    ``max_position_embeddings - pad_token_id - 1`` of them (8192 for
    bge-m3), while vLLM 0.32 lets ``max_model_len`` reach
    ``max_position_embeddings``: a longer prompt would index past the table.
    """
    max_positions, pad = config.get("max_position_embeddings"), config.get("pad_token_id")
    if "roberta" in str(config.get("model_type", "")) and max_positions and pad is not None:
        return int(max_positions) - int(pad) - 1
    return None


def max_tokens(model_config: Any) -> int:
    """The longest sequence that vLLM's ``model_config`` lets the model take."""
    limit = int(model_config.max_model_len)
    hf_config = model_config.hf_config
    keys = ("max_position_embeddings", "pad_token_id", "model_type")
    longest = positions({key: getattr(hf_config, key, None) for key in keys})
    return limit if longest is None else min(limit, longest)


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
    512, FlagEmbedding's) and the passages' ``max_passage_length`` (by
    default the model's length), neither beyond the model's ``max_tokens``."""
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
