"""Which of BgeM3EmbeddingModel's pooling tasks give which output, and the
tasks a request's prompts run. Pure: no vLLM.

Beside vLLM's tasks there is the plugin's own, :data:`ONE_PASS_TASK`:
``embed&token_classify`` with :data:`COLBERT_KWARG` in the request's
``PoolingParams.extra_kwargs``, which the plugin's model
(``serving/_one_pass.py``) answers with all three outputs from one pass."""

from __future__ import annotations

from dataclasses import dataclass

from ._exceptions import RequestError

__all__ = [
    "COLBERT_KWARG",
    "COLBERT_TASK",
    "DEFAULT_TASK",
    "GIVES_COLBERT",
    "GIVES_DENSE",
    "GIVES_SPARSE",
    "ONE_PASS_TASK",
    "Wants",
    "score_tasks",
    "tasks_for",
]

DEFAULT_TASK = "embed&token_classify"  # sparse and dense, in one pass
COLBERT_TASK = "token_embed"
# The plugin's task: DEFAULT_TASK with the ColBERT vectors appended, from the
# same pass (each output: dense, token weights, then ColBERT vectors).
ONE_PASS_TASK = "embed&token_classify&token_embed"
# The key in PoolingParams.extra_kwargs that asks the plugin's model for them.
COLBERT_KWARG = "bge_m3_sparse_plugin_colbert"

# What each pooling task puts into an output's data.
GIVES_SPARSE = frozenset({DEFAULT_TASK, "token_classify", ONE_PASS_TASK})
GIVES_DENSE = frozenset({DEFAULT_TASK, "embed", ONE_PASS_TASK})
GIVES_COLBERT = frozenset({COLBERT_TASK, ONE_PASS_TASK})


@dataclass(frozen=True)
class Wants:
    """What a request asks for, as the task check needs it."""

    sparse: bool
    dense: bool
    colbert: bool


def tasks_for(wants: Wants, one_pass: bool) -> tuple[str, ...]:
    """The pooling tasks that give what the request asks for, in the order
    its prompts run them: each input runs once per task.

    vLLM accepts any of the model's pooling tasks on each prompt, whatever
    task the server was started with, so one server answers every request:
    sparse and dense come from one task, ColBERT vectors from another, and
    with the plugin's model (``one_pass``) all three from one.
    """
    if not (wants.sparse or wants.dense or wants.colbert):
        raise RequestError(
            "data.return_sparse, data.return_dense and data.return_colbert_vecs are "
            "all false; ask for at least one",
            "data.return_sparse",
        )
    if one_pass and wants.colbert and (wants.sparse or wants.dense):
        return (ONE_PASS_TASK,)
    return (DEFAULT_TASK,) * (wants.sparse or wants.dense) + (COLBERT_TASK,) * wants.colbert


def score_tasks(one_pass: bool) -> tuple[str, ...]:
    """The tasks a score's prompts run: it needs all three outputs."""
    return tasks_for(Wants(sparse=True, dense=True, colbert=True), one_pass)
