"""A scoring request's path through the processor: its prompts (each
distinct query and passage once, tokenized here with its own cut, as
compute_score tokenizes queries and passages apart) and, from vLLM's
outputs, compute_score's five keys per pair. The processor holds the state
(the tokenizer and its lock, the limits); these functions hold no state of
their own."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._checks import check_colbert_values, check_limits
from .._config import Limits
from .._embeddings import Model, colbert_values_of, three_outputs
from .._prompts import score_plan, tokenize
from .._scores import pair_scores
from .._tasks import DEFAULT_TASK, score_tasks
from ..schemas import (
    ScoreItem,
    ScoreRequest,
    ScoreResponse,
    SparseEmbeddingUsage,
    needs_colbert,
)

__all__ = ["ScoreOptions", "score_prompts", "score_response"]


@dataclass(frozen=True)
class ScoreOptions:
    # A scoring request after pre_process: its pairs as indices, its texts dropped.
    n_queries: int  # the prompts are the distinct queries, then the distinct passages
    pairs: list[tuple[int, int]]
    weights: tuple[float, float, float] | None
    modes: tuple[str, ...] | None  # the scores asked; None: all five
    tasks: tuple[str, ...]  # score_tasks (one pass or two), or DEFAULT_TASK alone


def score_prompts(
    request: ScoreRequest,
    tokenizer: Any,
    cutting: threading.Lock,
    limits: Limits,
    model: Model,
    max_tokens: int,
    one_pass: bool,
) -> tuple[list[dict[str, list[int]]], ScoreOptions]:
    """The prompts of a score and its options, or a ``RequestError``
    (the processor's 400): its texts past the limits, or its ColBERT vectors
    past their bound (they reach the API server for the MaxSim: one budget)."""
    plan = score_plan(
        request.pair_list(), request.max_query_length, request.max_passage_length, max_tokens
    )
    field = "data.pairs" if request.pairs is not None else "data.documents"
    check_limits(plan.queries + plan.passages, limits.max_inputs, limits.max_chars, field)
    with cutting:  # one tokenizer, its cut set per call
        token_lists = [
            *tokenize(tokenizer, plan.queries, plan.query_cut),
            *tokenize(tokenizer, plan.passages, plan.passage_cut),
        ]
    modes = None if request.modes is None else tuple(request.modes)
    if needs_colbert(modes):
        values = colbert_values_of(token_lists, model)
        check_colbert_values(values, limits.max_colbert_values, field)
    options = ScoreOptions(
        n_queries=len(plan.queries),
        pairs=plan.pairs,
        weights=request.weights,
        modes=modes,
        tasks=score_tasks(one_pass) if needs_colbert(modes) else (DEFAULT_TASK,),
    )
    return [{"prompt_token_ids": ids} for ids in token_lists], options


def score_response(
    token_lists: Sequence[Sequence[int]], pooled: Sequence[Any], options: ScoreOptions, model: Model
) -> ScoreResponse:
    """compute_score's keys per pair, from vLLM's outputs of the prompts."""
    outputs = three_outputs(token_lists, pooled, options.tasks, model)
    scores = pair_scores(outputs, options.n_queries, options.pairs, options.weights, options.modes)
    prompt_tokens = sum(map(len, token_lists[: len(token_lists) // len(options.tasks)]))
    return ScoreResponse(
        data=[ScoreItem(index=i, scores=s) for i, s in enumerate(scores)],
        usage=SparseEmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
    )
