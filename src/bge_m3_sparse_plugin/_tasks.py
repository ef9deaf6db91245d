"""Which of BgeM3EmbeddingModel's pooling tasks give which output, and the
tasks a request's prompts run. Pure: no vLLM."""

from __future__ import annotations

from dataclasses import dataclass

from ._exceptions import RequestError

__all__ = [
    "COLBERT_TASK",
    "DEFAULT_TASK",
    "GIVES_COLBERT",
    "GIVES_DENSE",
    "GIVES_SPARSE",
    "SCORE_TASKS",
    "Wants",
    "tasks_for",
]

# What each pooling task of BgeM3EmbeddingModel puts into an output's data.
GIVES_SPARSE = frozenset({"embed&token_classify", "token_classify"})
GIVES_DENSE = frozenset({"embed&token_classify", "embed"})
GIVES_COLBERT = frozenset({"token_embed"})
DEFAULT_TASK = "embed&token_classify"  # sparse and dense, in one pass
COLBERT_TASK = "token_embed"
SCORE_TASKS = (DEFAULT_TASK, COLBERT_TASK)  # a score needs all three outputs


@dataclass(frozen=True)
class Wants:
    """What a request asks for, as the task check needs it."""

    sparse: bool
    dense: bool
    colbert: bool


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
