"""What a parsed request must satisfy before and after vLLM runs it: the
server's limits per request, and each prompt's length. Pure: no vLLM; the
processor turns a :class:`~._exceptions.RequestError` into vLLM's 400 that
names ``field``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._config import MAX_CHARS_ENV, MAX_COLBERT_VALUES_ENV, MAX_INPUTS_ENV
from ._exceptions import RequestError

__all__ = [
    "check_colbert_values",
    "check_counts",
    "check_dimensions",
    "check_lengths",
    "check_limits",
    "item_field",
]

# The lists of a request's data whose items each cost a text's work: a score's
# pairs and documents, and an embedding request's inputs.
_COUNTED = ("pairs", "documents", "input")


def item_field(index: int, single: bool) -> str:
    """How errors name input ``index``: ``data.input`` for a single input."""
    return "data.input" if single else f"data.input[{index}]"


def check_counts(data: dict[str, Any], max_inputs: int) -> None:
    """At most ``max_inputs`` items in each list of the raw ``data`` that
    counts texts, checked before the request is parsed: parsing a million
    pairs is itself the cost to refuse. One list of token ids is one input."""
    for name in _COUNTED:
        items = data.get(name)
        if not isinstance(items, list) or len(items) <= max_inputs:
            continue
        if name == "input" and isinstance(items[0], int):
            continue  # one token-id sequence
        raise _too_many(f"data.{name}", len(items), max_inputs)


def _too_many(field: str, n: int, max_inputs: int) -> RequestError:
    return RequestError(
        f"{field} has {n} items; at most {max_inputs} are "
        f"allowed per request (set {MAX_INPUTS_ENV} on the server to change it)",
        field,
    )


def check_colbert_values(
    values: int, max_values: int, field: str = "data.return_colbert_vecs"
) -> None:
    """The ColBERT vectors a request makes hold at most ``max_values`` values
    (tokens x hidden size), whether it returns them or scores with them:
    one budget for every path that makes them. ``field`` names the request's
    part that asked for them."""
    if values > max_values:
        scoring = field != "data.return_colbert_vecs"
        advice = ("give modes without colbert, " if scoring else "") + "send fewer or shorter texts"
        raise RequestError(
            f"{field}: the ColBERT vectors of this request hold {values} values (tokens x "
            f"hidden size){' to score with' if scoring else ''}; at most {max_values} are "
            f"allowed per request ({advice}, or set {MAX_COLBERT_VALUES_ENV} on the server)",
            field,
        )


def check_limits(
    inputs: Sequence[str | list[int]], max_inputs: int, max_chars: int, field: str = "data.input"
) -> None:
    """At most ``max_inputs`` inputs and ``max_chars`` characters of text;
    ``field`` is what the request calls them."""
    if len(inputs) > max_inputs:
        raise _too_many(field, len(inputs), max_inputs)
    chars = sum(len(item) for item in inputs if isinstance(item, str))
    if chars > max_chars:
        raise RequestError(
            f"{field} holds {chars} characters of text; at most {max_chars} are "
            f"allowed per request (split the request, or set {MAX_CHARS_ENV} on the "
            "server to change it)",
            field,
        )


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


def check_dimensions(dimensions: int | None, hidden_size: int) -> None:
    """The reference plugin's ``dimensions``: a Matryoshka size of the dense
    vector. bge-m3 declares none (its config has no ``matryoshka_dimensions``,
    and vLLM's reference plugin refuses the field for such a model), so only
    the model's own size, which cuts nothing, is honoured."""
    if dimensions is not None and dimensions != hidden_size:
        raise RequestError(
            f"data.dimensions={dimensions} cannot be honoured: bge-m3 has no Matryoshka "
            f"dimensions, and a dense vector cut short of its {hidden_size} values is not one "
            f"the model was trained to give; leave it out, or give {hidden_size}",
            "data.dimensions",
        )
