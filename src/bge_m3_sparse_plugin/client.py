"""Typed clients for a vLLM server running the plugin: sync and async.

Needs only pydantic and httpx (``pip install 'bge-m3-sparse-plugin[client]'``),
not vLLM::

    from bge_m3_sparse_plugin.client import SparseEmbeddingClient

    with SparseEmbeddingClient("http://127.0.0.1:8000") as client:
        result = client.embed(["I love China"], return_tokens=True)
    print(result.data[0].sparse_embedding)
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import httpx
from pydantic import ValidationError
from typing_extensions import TypedDict, Unpack

from .formats import SparseFormat, lexical_matching_score
from .schemas import (
    Input,
    SparseEmbeddingRequest,
    SparseEmbeddingResponse,
    describe_validation_error,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT_S",
    "AsyncSparseEmbeddingClient",
    "EmbedOptions",
    "SparseEmbeddingClient",
    "SparseEmbeddingError",
    "lexical_matching_score",
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
        self,
        message: str,
        status_code: int | None = None,
        param: str | None = None,
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
) -> tuple[dict[str, Any], str | None]:
    """The JSON body of a /pooling request, and its request id."""
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
    return body, request_id


def _unauthorized_message(response: httpx.Response) -> str:
    sent = "authorization" in response.request.headers
    if sent:
        return (
            "the server refused the API key: it is wrong, or not sent as "
            "'Authorization: Bearer KEY'. Pass api_key= the key the server was started "
            "with (--api-key or VLLM_API_KEY)"
        )
    return (
        "the server wants an API key and none was sent. Pass api_key= the key the "
        "server was started with (--api-key or VLLM_API_KEY)"
    )


def _parse_response(response: httpx.Response) -> SparseEmbeddingResponse:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 401:  # vLLM's {"error": "Unauthorized"}
        raise SparseEmbeddingError(_unauthorized_message(response), 401, None, body)
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
            response.status_code,
            body=body,
        )
    # vLLM wraps the plugin's output: {"request_id", "created_at", "data": {...}}.
    return SparseEmbeddingResponse.model_validate(body["data"])


def _dense_only(options: EmbedOptions) -> EmbedOptions:
    for name in ("return_dense", "return_sparse", "return_tokens", "return_colbert_vecs"):
        if name in options:
            raise TypeError(f"embed_dense() sets {name} itself; use embed() for other outputs")
    return {**options, "return_dense": True, "return_sparse": False}


def _dense_of(response: SparseEmbeddingResponse) -> list[list[float]]:
    dense = [item.dense_embedding for item in response.data]
    if any(vector is None for vector in dense):
        raise SparseEmbeddingError("the server sent no dense vector, though return_dense was asked")
    return [vector for vector in dense if vector is not None]


_Http = TypeVar("_Http", httpx.Client, httpx.AsyncClient)


class _Client(Generic[_Http]):
    _http_class: type[_Http]
    _http: _Http

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        model: str | None = None,
        timeout: float | httpx.Timeout | None = DEFAULT_TIMEOUT_S,
        headers: dict[str, str] | None = None,
        api_key: str | None = None,
        http_client: _Http | None = None,
    ) -> None:
        self.model = model
        self._url = base_url.rstrip("/") + "/pooling"
        # Sent with each request, so that they apply to a caller's http_client too.
        self._headers = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        if http_client is None:
            self._http = self._http_class(timeout=timeout)
            self._owns_http = True
        elif not isinstance(http_client, self._http_class):
            raise TypeError(
                f"http_client must be an {self._http_class.__module__}."
                f"{self._http_class.__name__}, got {type(http_client).__name__}"
            )
        else:
            # The caller's client keeps its own settings (proxies, TLS, pools,
            # timeout) and stays open after close(): the caller owns it.
            self._http = http_client
            self._owns_http = False

    def _request_headers(self, request_id: str | None) -> dict[str, str]:
        if request_id:
            return {**self._headers, "X-Request-Id": request_id}
        return self._headers


class SparseEmbeddingClient(_Client[httpx.Client]):
    """A blocking client.

    ``model`` is the served model name; None lets vLLM pick its only model.
    ``timeout`` is in seconds (or an ``httpx.Timeout``). ``api_key`` is sent as
    ``Authorization: Bearer KEY``. ``http_client`` is an ``httpx.Client`` of
    one's own (proxies, TLS, pools); it keeps its own timeout and is not
    closed by :meth:`close`.
    """

    _http_class = httpx.Client

    def embed(
        self,
        input: Input,
        **options: Unpack[EmbedOptions],
    ) -> SparseEmbeddingResponse:
        """Embed a text, a list of texts, or token ids; see :class:`EmbedOptions`."""
        body, request_id = _prepare(self.model, input, options)
        response = self._http.post(self._url, json=body, headers=self._request_headers(request_id))
        return _parse_response(response)

    def embed_dense(self, input: Input, **options: Unpack[EmbedOptions]) -> list[list[float]]:
        """BGE-M3's dense vectors (CLS, normalised), one per input, from ``/pooling``."""
        return _dense_of(self.embed(input, **_dense_only(options)))

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> SparseEmbeddingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSparseEmbeddingClient(_Client[httpx.AsyncClient]):
    """The asyncio version of :class:`SparseEmbeddingClient`."""

    _http_class = httpx.AsyncClient

    async def embed(
        self,
        input: Input,
        **options: Unpack[EmbedOptions],
    ) -> SparseEmbeddingResponse:
        """See :meth:`SparseEmbeddingClient.embed`."""
        body, request_id = _prepare(self.model, input, options)
        response = await self._http.post(
            self._url, json=body, headers=self._request_headers(request_id)
        )
        return _parse_response(response)

    async def embed_dense(self, input: Input, **options: Unpack[EmbedOptions]) -> list[list[float]]:
        """See :meth:`SparseEmbeddingClient.embed_dense`."""
        return _dense_of(await self.embed(input, **_dense_only(options)))

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSparseEmbeddingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
