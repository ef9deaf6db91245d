"""Typed clients for a vLLM server running the plugin: sync and async.

Needs only pydantic and httpx (``pip install 'bge-m3-sparse-plugin[client]'``),
not vLLM::

    from bge_m3_sparse_plugin.client import SparseEmbeddingClient

    with SparseEmbeddingClient("http://127.0.0.1:8000") as client:
        result = client.embed(["I love China"], return_tokens=True)
    print(result.data[0].sparse_embedding)
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import ValidationError
from typing_extensions import TypedDict, Unpack

from .formats import SparseFormat, lexical_matching_score
from .schemas import Input, SparseEmbeddingRequest, SparseEmbeddingResponse, describe_validation_error

__all__ = [
    "SparseEmbeddingClient",
    "AsyncSparseEmbeddingClient",
    "SparseEmbeddingError",
    "EmbedOptions",
    "lexical_matching_score",
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT_S",
]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0


class SparseEmbeddingError(Exception):
    """A request the server (or the client's own check of it) refused.

    ``status_code`` is the HTTP status, or None when the client refused the
    request before sending it; ``message`` is the server's message and
    ``param`` the field it names, when it names one.
    """

    def __init__(
        self, message: str, status_code: int | None = None, param: str | None = None,
        body: Any = None,
    ) -> None:
        prefix = f"HTTP {status_code}: " if status_code is not None else ""
        super().__init__(prefix + message)
        self.message = message
        self.status_code = status_code
        self.param = param
        self.body = body


class EmbedOptions(TypedDict, total=False):
    """The keyword arguments of ``embed``: the request's ``data`` fields (the
    README's table gives their defaults and meaning), vLLM's
    ``truncate_prompt_tokens``, and an ``X-Request-Id`` header."""

    return_tokens: bool
    return_sparse: bool
    return_dense: bool
    return_colbert_vecs: bool
    sparse_format: SparseFormat
    top_k: int | None
    min_weight: float | None
    truncate_prompt_tokens: int | None
    request_id: str | None


def _prepare(
    model: str | None, input: Input, options: EmbedOptions
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The JSON body and headers of a /pooling request."""
    data: dict[str, Any] = dict(options)
    truncate = data.pop("truncate_prompt_tokens", None)
    request_id = data.pop("request_id", None)
    # Checked here with the server's own schema, so that a bad request fails
    # before it is sent, with the message the server would give.
    try:
        request = SparseEmbeddingRequest.model_validate({"input": input, **data})
    except ValidationError as exc:
        message, field = describe_validation_error(exc)
        raise SparseEmbeddingError(message, param=field) from None
    body: dict[str, Any] = {"data": request.model_dump(exclude_defaults=True)}
    if model is not None:
        body["model"] = model
    if truncate is not None:
        body["truncate_prompt_tokens"] = truncate
    return body, ({"X-Request-Id": request_id} if request_id else None)


def _parse_response(response: httpx.Response) -> SparseEmbeddingResponse:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):  # vLLM's {"error": {"message", "type", "param", "code"}}
            message, param = str(error.get("message")), error.get("param")
        elif isinstance(body, dict) and "message" in body:
            message, param = str(body["message"]), body.get("param")
        else:
            message, param = response.text or response.reason_phrase, None
        raise SparseEmbeddingError(message, response.status_code, param, body)
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise SparseEmbeddingError(
            f"the server's answer is not a plugin response: {response.text[:200]!r}",
            response.status_code, body=body,
        )
    # vLLM wraps the plugin's output: {"request_id", "created_at", "data": {...}}.
    return SparseEmbeddingResponse.model_validate(body["data"])


class _Client:
    _http_class: type[httpx.Client] | type[httpx.AsyncClient]

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        model: str | None = None,
        timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT_S,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        self._http = self._http_class(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=headers
        )


class SparseEmbeddingClient(_Client):
    """A blocking client. ``model`` is the served model name; None lets vLLM pick
    its only model. ``timeout`` is in seconds (or an ``httpx.Timeout``)."""

    _http_class = httpx.Client

    def embed(
        self,
        input: Input,
        **options: Unpack[EmbedOptions],
    ) -> SparseEmbeddingResponse:
        """Embed a text, a list of texts, or token ids; see :class:`EmbedOptions`."""
        body, headers = _prepare(self.model, input, options)
        return _parse_response(self._http.post("/pooling", json=body, headers=headers))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SparseEmbeddingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSparseEmbeddingClient(_Client):
    """The asyncio version of :class:`SparseEmbeddingClient`."""

    _http_class = httpx.AsyncClient

    async def embed(
        self,
        input: Input,
        **options: Unpack[EmbedOptions],
    ) -> SparseEmbeddingResponse:
        """See :meth:`SparseEmbeddingClient.embed`."""
        body, headers = _prepare(self.model, input, options)
        return _parse_response(await self._http.post("/pooling", json=body, headers=headers))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncSparseEmbeddingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
