"""Every top-level field of a plugin request, honoured or refused by name.

vLLM's ``IOProcessorRequest`` takes, beside ``data``, the fields of its
pooling mixins, and hands the plugin ``data`` alone: the others act (or not)
inside vLLM. Each is listed here against each request kind. A field that
would change an answer wrongly, or that vLLM drops, is a 400 naming it:

- ``truncate_prompt_tokens`` cuts an embedding request's texts, keeping
  ``</s>`` (``_prompts.py``). A score's prompts are the plugin's own token ids,
  cut by ``max_query_length`` / ``max_passage_length``; vLLM would cut them
  again to the first N ids and lose ``</s>`` (a wrong ColBERT score).
- ``truncation_side: "left"`` keeps the last N tokens and loses ``<s>``;
  ``padding: "max_length"`` pads every prompt to the model's length, and the
  pad tokens would be scored as text.
- ``encoding_format``, ``embed_dtype`` and ``endianness`` shape vLLM's own
  responses, not a plugin's (``data.encoding_format`` is the plugin's).
- ``mm_processor_kwargs``: this is a text model. ``dimensions``: vLLM refuses
  it itself. A field vLLM does not know (``use_activation``, ``embed_task`` at
  the top level) vLLM ignores with a log line: refused here, by name.
- ``model``, ``user``, ``request_id``, ``priority``, ``cache_salt`` and ``task``
  change no answer: left to vLLM.

:func:`refusal` is the rule (pure); :func:`check_top_level_fields` installs it,
once per process, in front of vLLM's plugin request factory, which the
processor's constructor calls (the factory is where the whole request is
still in hand).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..schemas import is_score_request

__all__ = ["FACTORY_CLASSES", "LEFT_TO_VLLM", "check_top_level_fields", "refusal"]

logger = logging.getLogger("vllm.plugins.bge_m3_sparse_plugin.serving._top_level")

# Fields that change no answer; vLLM acts on them.
LEFT_TO_VLLM = frozenset({"model", "user", "request_id", "priority", "cache_salt", "task", "data"})
# field -> the values it may have (its default first), per kind: None for any.
_EMBEDDING_ALLOWS: dict[str, tuple[Any, ...] | None] = {
    "truncate_prompt_tokens": None,
    "truncation_side": (None, "right"),
    "padding": (None, "do_not_pad"),
    "encoding_format": ("float",),
    "embed_dtype": ("float32",),
    "endianness": ("native",),
    "mm_processor_kwargs": (None, {}),
    "dimensions": (None,),
}
_SCORE_ALLOWS = {**_EMBEDDING_ALLOWS, "truncate_prompt_tokens": (None,)}
_WHY = {
    "truncate_prompt_tokens": (
        "a score cuts its texts with data.max_query_length and data.max_passage_length, "
        "keeping </s> as compute_score does; vLLM's cut would drop it"
    ),
    "truncation_side": "'left' keeps the last tokens and drops <s>; cut from the right",
    "padding": "pad tokens would be embedded as text",
    "encoding_format": "shapes vLLM's own responses; the plugin's is data.encoding_format",
    "embed_dtype": "shapes vLLM's own responses; the plugin sends float32",
    "endianness": "shapes vLLM's own responses; the plugin's base64 is little-endian",
    "mm_processor_kwargs": "this is a text model",
    "dimensions": "bge-m3 has no Matryoshka dimensions",
}
# Where vLLM's plugin request factory lives (its online half is wrapped).
FACTORY_CLASSES = ("vllm.entrypoints.pooling.pooling.io_processor:PluginWithIOProcessorPlugins",)
_WRAPPED = "_bge_m3_sparse_top_level_checked"


def refusal(fields: Mapping[str, Any], data: object) -> tuple[str, str] | None:
    """(message, field) for the first top-level field that the request kind
    of ``data`` cannot honour, or None. ``fields`` are the request's fields
    as sent (defaults included), beside ``data``. A body without ``data``
    (vLLM parsed it as another kind of pooling request) is refused first."""
    if "data" not in fields:
        named = next((n for n in ("input", "messages") if n in fields), None)
        return (
            "data: a request to the plugin holds its texts in data"
            + (f", not in {named}" if named else "")
            + ' ({"data": {"input": [...]}}, or query and documents, or pairs, to score)',
            "data",
        )
    score = is_score_request(data)
    allows = _SCORE_ALLOWS if score else _EMBEDDING_ALLOWS
    kind = "a score request" if score else "an embedding request"
    for name, value in fields.items():
        if name in LEFT_TO_VLLM:
            continue
        if name not in allows:
            return (
                f"{name}: not a field of the plugin's requests at the top level (vLLM would "
                "ignore it); the plugin's options go inside data",
                name,
            )
        allowed = allows[name]
        if allowed is not None and value not in allowed:
            return f"{name}={value!r} is refused on {kind}: {_WHY[name]}", name
    return None


def check_top_level_fields() -> str | None:
    """Check each online plugin request's top-level fields with :func:`refusal`
    before vLLM's factory runs the plugin. Returns the class wrapped, or None
    (with a warning) where this vLLM has none of :data:`FACTORY_CLASSES`."""
    for where in FACTORY_CLASSES:
        module_name, _, class_name = where.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        if not getattr(factory, _WRAPPED, False):
            factory.get_request_factory_online = _wrap(factory.get_request_factory_online)
            setattr(factory, _WRAPPED, True)
        return where
    logger.warning(
        "bge_m3_sparse_plugin: vLLM's plugin request factory was not found in %s; "
        "top-level fields such as truncate_prompt_tokens are not checked on score requests",
        " or ".join(FACTORY_CLASSES),
    )
    return None


def _wrap(make: Callable[..., Any]) -> Callable[..., Any]:
    def checked(self: Any, ctx: Any) -> Any:
        request = ctx.request
        sent = dict(request)  # pydantic: the declared fields, defaults included
        sent.update(request.model_extra or {})  # and those vLLM would ignore
        found = refusal(sent, sent.get("data"))
        if found is not None:
            from vllm.exceptions import VLLMValidationError

            message, field = found
            raise VLLMValidationError(message, parameter=field)
        return make(self, ctx)

    return checked
