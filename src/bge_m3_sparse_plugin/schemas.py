"""Pydantic models for the plugin's request (the ``data`` object) and response."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from ._config import DEFAULT_MAX_QUERY_LENGTH
from ._formats import EncodingFormat, SparseFormat

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "EMBED_TASKS",
    "SCORE_KEYS",
    "EmbedTask",
    "IndicesValues",
    "ScoreItem",
    "ScoreMode",
    "ScoreRequest",
    "ScoreResponse",
    "SparseEmbedding",
    "SparseEmbeddingItem",
    "SparseEmbeddingRequest",
    "SparseEmbeddingResponse",
    "SparseEmbeddingUsage",
    "SparseToken",
    "describe_validation_error",
    "is_score_request",
    "needs_colbert",
]

Input = str | list[str] | list[int] | list[list[int]]
# The reference plugin's embed_task values (vLLM PR #37632).
EmbedTask = Literal["dense", "sparse", "dense&sparse"]
EMBED_TASKS: tuple[EmbedTask, ...] = get_args(EmbedTask)

_INPUT_SHAPES = (
    "a string, a non-empty list of strings, a non-empty list of token ids, "
    "or a non-empty list of non-empty lists of token ids"
)


def _is_token_id(value: object) -> bool:
    return type(value) is int and value >= 0


def _check_token_ids(value: object, where: str) -> None:
    if not isinstance(value, list) or not value:
        raise PydanticCustomError(
            "input_shape",
            "{where} must be a non-empty list of token ids, got {value}",
            {"where": where, "value": _short(value)},
        )
    # The common case in C: every element exactly an int (not a bool), none
    # negative; the loop below runs only to name a bad id
    # (benchmarks/bench_check_input.py and RESULTS.md section 9 measure both).
    if set(map(type, value)) == {int} and min(value) >= 0:
        return
    _name_the_bad_token_id(value, where)


def _name_the_bad_token_id(value: list[object], where: str) -> None:
    """The element-by-element walk: finds and names the first bad id."""
    for i, token in enumerate(value):
        if not _is_token_id(token):
            raise PydanticCustomError(
                "input_token_id",
                "{where}[{i}] must be a token id (an integer >= 0), got {value}",
                {"where": where, "i": i, "value": _short(token)},
            )


def json_repr(value: object) -> str:
    """A value as JSON writes it (``true``, ``null``), for messages about a
    request's JSON; ``repr`` where JSON has no form for it."""
    try:
        return _short_text(json.dumps(value))
    except (TypeError, ValueError):
        return _short(value)


def _short_text(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (JSON's ``"\\ud800"`` escape
    parses to one), or None: no UTF-8 carries it, and tokenizers refuse it."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


_SURROGATE = "holds a lone surrogate (U+{code}) at character {at}, which no UTF-8 text can carry"


def _check_text(text: str, where: str) -> None:
    at = _lone_surrogate(text)
    if at is not None:
        raise PydanticCustomError(
            "input_text",
            "{where} " + _SURROGATE,
            {"where": where, "code": f"{ord(text[at]):04X}", "at": at},
        )


def _utf8_text(text: str) -> str:
    """A score's text: as the embedding input, text that UTF-8 can carry."""
    at = _lone_surrogate(text)
    if at is not None:
        raise PydanticCustomError(
            "text_encoding", _SURROGATE, {"code": f"{ord(text[at]):04X}", "at": at}
        )
    return text


def _null_is_false(value: bool | None) -> bool:
    return bool(value)


def _check_input(value: object) -> Input:
    """Accept the four input shapes; name the first bad element otherwise.

    A plain union would report a failure for every member of the union; this
    says, once, where the input went wrong.
    """
    if isinstance(value, str):
        _check_text(value, "data.input")
        return value
    if not isinstance(value, list) or not value:
        raise PydanticCustomError(
            "input_shape",
            "data.input must be " + _INPUT_SHAPES + ", got {value}",
            {"value": _short(value)},
        )
    first = value[0]
    if isinstance(first, str):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise PydanticCustomError(
                    "input_text",
                    "data.input[{i}] must be a string like data.input[0], got {value}",
                    {"i": i, "value": _short(item)},
                )
            _check_text(item, f"data.input[{i}]")
        return value
    if isinstance(first, list):
        for i, item in enumerate(value):
            _check_token_ids(item, f"data.input[{i}]")
        return value
    if _is_token_id(first):
        _check_token_ids(value, "data.input")
        return value
    raise PydanticCustomError(
        "input_shape",
        "data.input must be " + _INPUT_SHAPES + ", got {value}",
        {"value": _short(value)},
    )


_EMBED_TASK_GIVES = {
    "dense": "the dense vector alone",
    "sparse": "the sparse weights alone",
    "dense&sparse": "the dense vector and the sparse weights",
}
# Why the reference plugin's flags may only be true here.
_ONLY_TRUE = {
    "use_activation": (
        "the plugin serves FlagEmbedding's outputs, the activated ones (normalised dense and "
        "ColBERT vectors, ReLU'd token weights), and no raw ones"
    ),
    "add_special_tokens": "bge-m3's outputs are those of a text between <s> and </s>",
}


class SparseEmbeddingRequest(BaseModel):
    """The ``data`` object of a request, with FlagEmbedding's ``encode`` flags."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Annotated[Input, BeforeValidator(_check_input)] = Field(
        description=(
            "A text, a list of texts, or pre-tokenized input: one list of token ids "
            "or a list of them. Token ids are taken as the whole sequence, as the "
            "tokenizer gives it, `<s>` and `</s>` included."
        )
    )
    return_tokens: Annotated[StrictBool | None, AfterValidator(_null_is_false)] = Field(
        default=False,
        description="Add each token's text to the sparse entries (null, as the reference "
        "plugin takes it: false).",
    )
    return_sparse: StrictBool = Field(
        default=True, description="Return the sparse (lexical) weights."
    )
    return_dense: StrictBool = Field(
        default=False, description="Return the normalised dense (CLS) embedding too."
    )
    return_colbert_vecs: StrictBool = Field(
        default=False,
        description=(
            "Return the ColBERT multi-vectors (one normalised vector per token but "
            "the first, as FlagEmbedding), from the same pass as sparse and dense."
        ),
    )
    encoding_format: EncodingFormat = Field(
        default="float",
        description=(
            "How dense_embedding and colbert_vecs travel: float, JSON numbers; base64, "
            "each vector's little-endian float32 bytes in base64 (one string for the dense "
            "vector, one per ColBERT vector), as OpenAI's and vLLM's /v1/embeddings. "
            "Sparse entries are the same in both."
        ),
    )
    sparse_format: SparseFormat = Field(
        default="token_weights",
        description=(
            "token_weights: [{token_id, weight, token}]; lexical_weights: FlagEmbedding's "
            '{"<token_id>": weight}; indices_values: {indices, values}.'
        ),
    )
    top_k: Annotated[int, Field(strict=True, ge=1)] | None = Field(
        default=None,
        description="Keep only the k largest weights (ties: the earlier entry), in their order.",
    )
    min_weight: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="Drop entries whose weight is below this."
    )
    # vLLM's reference plugin's fields (tests/plugins/bge_m3_sparse_plugin in
    # vLLM), so that its requests run here unchanged; docs/migrating.md says
    # how its answers and these differ.
    embed_task: EmbedTask | None = Field(
        default=None,
        description=(
            "vLLM's reference plugin's choice of outputs: dense, sparse or dense&sparse. It "
            "sets return_dense and return_sparse; either given beside it must agree."
        ),
    )
    dimensions: Annotated[int, Field(strict=True, ge=1)] | None = Field(
        default=None,
        description=(
            "The reference plugin's Matryoshka size of the dense vector. bge-m3 declares "
            "none, so only the model's own size (its hidden size) can be honoured."
        ),
    )
    use_activation: StrictBool | None = Field(
        default=None,
        description=(
            "The reference plugin's flag: true, its default, is what the plugin serves "
            "(FlagEmbedding's outputs: normalised vectors, ReLU'd weights)."
        ),
    )
    add_special_tokens: StrictBool | None = Field(
        default=None,
        description="vLLM's flag, as the reference plugin takes it: <s> and </s> are always added.",
    )

    @field_validator("use_activation", "add_special_tokens", mode="before")
    @classmethod
    def _only_what_is_served(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or value is True:
            return value
        name = str(info.field_name)
        raise PydanticCustomError(
            "input_unsupported",
            "data.{name} may be true or null (the default), got {given}: {why}",
            {
                "name": name,
                "given": json_repr(value),
                "why": _ONLY_TRUE[name],
                "field": f"data.{name}",
            },
        )

    @model_validator(mode="before")
    @classmethod
    def _embed_task_sets_the_flags(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("embed_task") not in EMBED_TASKS:
            return data  # none, or one the field itself refuses by name
        task = data["embed_task"]
        flags = {"return_dense": "dense" in task.split("&"), "return_sparse": "sparse" in task}
        for name, value in flags.items():
            if name in data and data[name] is not value:
                raise PydanticCustomError(
                    "input_combination",
                    "data.embed_task {task} returns {what}, but data.{name} is {given}: "
                    "give one of the two",
                    {
                        "task": repr(task),
                        "what": _EMBED_TASK_GIVES[task],
                        "name": name,
                        "given": json_repr(data[name]),
                        "field": "data.embed_task",
                    },
                )
        return {**data, **flags}

    @model_validator(mode="after")
    def _tokens_need_token_weights(self) -> SparseEmbeddingRequest:
        if self.return_tokens and self.sparse_format != "token_weights":
            raise PydanticCustomError(
                "input_combination",
                "data.return_tokens is true, but only sparse_format 'token_weights' has "
                "token strings; data.sparse_format is {fmt}",
                {"fmt": repr(self.sparse_format), "field": "data.return_tokens"},
            )
        return self

    def is_single(self) -> bool:
        """One text or one token-id sequence (errors then name ``data.input``),
        rather than a list of them (``data.input[i]``). Decided here only."""
        return isinstance(self.input, str) or isinstance(self.input[0], int)

    def inputs(self) -> list[str] | list[list[int]]:
        """The input as a list of texts or a list of token-id sequences."""
        if self.is_single():
            return cast("list[str] | list[list[int]]", [self.input])
        return cast("list[str] | list[list[int]]", list(self.input))


class SparseToken(TypedDict):
    """One entry of ``sparse_embedding``: a plain dict, as in the JSON."""

    token_id: int
    weight: float
    token: str | None


class IndicesValues(TypedDict):
    """``sparse_format="indices_values"``: parallel lists, as vector databases take them."""

    indices: list[int]
    values: list[float]


# In the order pydantic tries them: a {"indices", "values"} object is never
# taken for a lexical_weights dict, whose keys are token ids.
SparseEmbedding = list[SparseToken] | IndicesValues | dict[str, float]


class SparseEmbeddingItem(BaseModel):
    index: int
    object: Literal["sparse-embedding"] = "sparse-embedding"
    sparse_embedding: SparseEmbedding | None = None
    # JSON numbers, or base64 (the request's encoding_format): _vectors.py
    # reads either as numpy, and so do dense_array and colbert_array.
    dense_embedding: list[float] | str | None = None
    colbert_vecs: list[list[float]] | list[str] | None = None

    def dense_array(self) -> np.ndarray | None:
        """The dense vector as float32, whichever encoding it came in."""
        if self.dense_embedding is None:
            return None
        from ._vectors import vector_from_wire  # numpy: not needed to import the client

        return vector_from_wire(self.dense_embedding)

    def colbert_array(self) -> np.ndarray | None:
        """The ColBERT vectors as a (tokens, hidden) float32 array, whichever
        encoding they came in."""
        if self.colbert_vecs is None:
            return None
        from ._vectors import matrix_from_wire

        return matrix_from_wire(self.colbert_vecs)

    @model_serializer(mode="wrap")
    def _drop_unrequested(self, handler: Any) -> dict[str, Any]:
        # The embeddings appear only when asked for; `token` inside an entry
        # stays (null), as in the upstream response.
        out: dict[str, Any] = handler(self)
        for key in ("sparse_embedding", "dense_embedding", "colbert_vecs"):
            if out.get(key) is None:
                out.pop(key, None)
        return out


class SparseEmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: None = None


class SparseEmbeddingResponse(BaseModel):
    data: list[SparseEmbeddingItem]
    usage: SparseEmbeddingUsage


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """A one-line message naming each bad field, and the first field's path."""
    problems: list[str] = []
    fields: list[str] = []
    for err in exc.errors(include_url=False):
        path = "data" + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in err["loc"]
        )
        fields.append(err.get("ctx", {}).get("field", path))
        if err["type"].startswith("input_"):
            problems.append(err["msg"])  # our own messages name the element already
        elif err["type"] == "missing":
            problems.append(f"{path}: field required")
        else:
            problems.append(f"{path}: {err['msg']}, got {_short(err.get('input'))}")
    return "invalid request data: " + "; ".join(problems), fields[0]


# Scoring: FlagEmbedding's compute_score, served.

# compute_score's keys, in its order: each pair's ``scores`` holds them all,
# or those a request's ``modes`` name.
ScoreMode = Literal["colbert", "sparse", "dense", "sparse+dense", "colbert+sparse+dense"]
SCORE_KEYS: tuple[ScoreMode, ...] = get_args(ScoreMode)


def needs_colbert(modes: Sequence[str] | None) -> bool:
    """Whether scores of ``modes`` (None: all five) need the ColBERT vectors."""
    return modes is None or any("colbert" in mode for mode in modes)


# "" too: compute_score takes it, as <s></s>.
_Text = Annotated[str, Field(strict=True), AfterValidator(_utf8_text)]
_Weight = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class ScoreRequest(BaseModel):
    """The ``data`` object of a scoring request: ``BGEM3FlagModel.compute_score``
    for one query against ``documents`` (the rerank case), or for ``pairs``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: _Text | None = Field(default=None, description="The query, scored against documents.")
    documents: Annotated[list[_Text], Field(min_length=1)] | None = Field(
        default=None, description="The passages to score against query, in the order returned."
    )
    pairs: Annotated[list[tuple[_Text, _Text]], Field(min_length=1)] | None = Field(
        default=None, description="[query, passage] pairs, instead of query and documents."
    )
    weights: tuple[_Weight, _Weight, _Weight] | None = Field(
        default=None,
        description="[w_dense, w_sparse, w_colbert] for the combined keys; [1, 1, 1] by default.",
    )
    max_query_length: Annotated[int, Field(strict=True, ge=1)] | None = Field(
        default=None,
        description=(
            f"Cut each query at this many tokens, </s> kept; {DEFAULT_MAX_QUERY_LENGTH} by default."
        ),
    )
    max_passage_length: Annotated[int, Field(strict=True, ge=1)] | None = Field(
        default=None,
        description=(
            "Cut each passage at this many tokens, </s> kept; by default, and at most, "
            "the model's length on this server."
        ),
    )
    modes: Annotated[list[ScoreMode], Field(min_length=1)] | None = Field(
        default=None,
        description=(
            "The scores to compute, of compute_score's keys; all five by default. "
            "Without 'colbert' and 'colbert+sparse+dense', no ColBERT vector is computed."
        ),
    )

    @model_validator(mode="after")
    def _one_shape(self) -> ScoreRequest:
        if self.pairs is not None:
            for name in ("query", "documents"):
                if getattr(self, name) is not None:
                    raise PydanticCustomError(
                        "input_combination",
                        "data.pairs is given, and so is data.{name}: send query and "
                        "documents, or pairs",
                        {"name": name, "field": f"data.{name}"},
                    )
        elif self.query is None or self.documents is None:
            missing = "query" if self.query is None else "documents"
            raise PydanticCustomError(
                "input_combination",
                "data.{missing} is missing: a scoring request has query and documents, or pairs",
                {"missing": missing, "field": f"data.{missing}"},
            )
        if self.weights is not None:
            w_dense, w_sparse, _ = self.weights
            if not math.isfinite(sum(self.weights)):
                raise PydanticCustomError(
                    "input_weights",
                    "data.weights: their sum must be a finite number (each score is a "
                    "weighted mean, each weight divided by the sum), got {weights}",
                    {"weights": list(self.weights), "field": "data.weights"},
                )
            if w_dense + w_sparse <= 0:
                raise PydanticCustomError(
                    "input_weights",
                    "data.weights: w_dense + w_sparse must be above 0 (sparse+dense is "
                    "their weighted mean), got {weights}",
                    {"weights": list(self.weights), "field": "data.weights"},
                )
        return self

    def pair_list(self) -> list[tuple[str, str]]:
        """The (query, passage) pairs, in the order of the response."""
        if self.pairs is not None:
            return list(self.pairs)
        assert self.query is not None and self.documents is not None  # _one_shape
        return [(self.query, document) for document in self.documents]


class ScoreItem(BaseModel):
    """One pair's scores: ``compute_score``'s five keys."""

    index: int
    object: Literal["score"] = "score"
    scores: dict[str, float]


class ScoreResponse(BaseModel):
    data: list[ScoreItem]
    usage: SparseEmbeddingUsage


def is_score_request(data: object) -> bool:
    """A ``data`` object that asks for scores (it names query, documents or
    pairs) rather than embeddings. Decided here only."""
    return isinstance(data, ScoreRequest) or (
        isinstance(data, dict) and not {"query", "documents", "pairs"}.isdisjoint(data)
    )
