"""Typed clients for a vLLM server running the plugin: sync and async.

Needs only pydantic and httpx (``pip install 'bge-m3-sparse-plugin[client]'``),
not vLLM::

    from bge_m3_sparse_plugin.client import SparseEmbeddingClient

    with SparseEmbeddingClient("http://127.0.0.1:8000") as client:
        result = client.embed(["I love China"], return_tokens=True)
    print(result.data[0].sparse_embedding)
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import httpx
from pydantic import ValidationError
from typing_extensions import TypedDict, Unpack

from ._config import (
    ADAPTER_BATCH_SIZE,
    DEFAULT_BASE_URL,
    DEFAULT_TIMEOUT_S,
    KEEPALIVE_EXPIRY_S,
)
from ._exceptions import SparseEmbeddingError
from ._formats import EncodingFormat, SparseFormat
from ._scores import lexical_matching_score
from .schemas import (
    EmbedTask,
    Input,
    ScoreRequest,
    ScoreResponse,
    SparseEmbeddingRequest,
    SparseEmbeddingResponse,
    describe_validation_error,
)

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_RETRIES",
    "DEFAULT_SCORE_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "KEEPALIVE_EXPIRY_S",
    "AsyncSparseEmbeddingClient",
    "EmbedOptions",
    "PoolingResult",
    "ScoreResult",
    "SparseEmbeddingClient",
    "SparseEmbeddingError",
    "lexical_matching_score",
    "retry_delay",
]

DEFAULT_RETRIES = 2  # after the first try: failures in transit (RETRY_ERRORS), and 503s
DEFAULT_BACKOFF_S = 0.5  # the first retry's longest wait; doubled for each next one
MAX_DELAY_S = 30.0  # the longest wait between tries, a server's Retry-After included
RETRY_STATUSES = frozenset({503})  # vLLM's engine is gone or a proxy's backend is down
# The score requests an async client.score() has in flight at once: well
# under httpx's default pool (100 connections), so that none waits for one.
DEFAULT_SCORE_CONCURRENCY = 8
# Failures of a request that may be sent again as it is: each /pooling request
# is a pure function of its body, so a try that the server may have received
# (a read or write error) is as safe to repeat as one that never left.
RETRY_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


class PoolingResult(SparseEmbeddingResponse):
    """The plugin's response, with what vLLM adds around it: its request id
    (``pooling-`` and the ``request_id=`` sent as ``X-Request-Id``, or an id of
    its own) and the time, in seconds since the epoch."""

    request_id: str | None = None
    created_at: int | None = None


class ScoreResult(ScoreResponse):
    """A scoring response, with vLLM's request id and time (as :class:`PoolingResult`)."""

    request_id: str | None = None
    created_at: int | None = None


_Result = TypeVar("_Result", PoolingResult, ScoreResult)


class EmbedOptions(TypedDict, total=False):
    """The keyword arguments of ``embed``: the request's ``data`` fields (the
    README's table gives their defaults and meaning), vLLM's
    ``truncate_prompt_tokens``, and an ``X-Request-Id`` header."""

    return_tokens: bool
    return_sparse: bool
    return_dense: bool
    return_colbert_vecs: bool
    sparse_format: SparseFormat
    encoding_format: EncodingFormat
    top_k: int | None
    min_weight: float | None
    # vLLM's reference plugin's fields, with its meaning (docs/migrating.md).
    embed_task: EmbedTask | None
    dimensions: int | None
    use_activation: bool | None
    add_special_tokens: bool | None
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


def _parse_response(response: httpx.Response, result: type[_Result]) -> _Result:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code == 401:  # vLLM's {"error": "Unauthorized"}
        raise SparseEmbeddingError(_unauthorized_message(response), 401, None, body, response)
    if response.status_code >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):  # vLLM's {"error": {"message", "type", "param", "code"}}
            message, param = str(error.get("message")), error.get("param")
        elif isinstance(error, str):  # {"error": "..."}, as vLLM's 401 and many proxies send
            message, param = error, None
        elif isinstance(body, dict) and "message" in body:
            message, param = str(body["message"]), body.get("param")
        else:
            message, param = response.text or response.reason_phrase, None
        raise SparseEmbeddingError(message, response.status_code, param, body, response)
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        raise SparseEmbeddingError(
            f"the server's answer is not a plugin response: {response.text[:200]!r}",
            response.status_code,
            body=body,
            response=response,
        )
    # vLLM wraps the plugin's output: {"request_id", "created_at", "data": {...}}.
    return result.model_validate(
        {**body["data"], "request_id": body.get("request_id"), "created_at": body.get("created_at")}
    )


def retry_delay(retry: int, backoff: float, retry_after: str | None = None) -> float:
    """The longest wait before retry number ``retry`` (0 for the first):
    ``backoff`` doubled for each earlier retry, or the server's
    ``Retry-After`` (seconds or an HTTP date) when it sends one; at most
    :data:`MAX_DELAY_S`. The clients wait the server's ``Retry-After``, and
    otherwise a time drawn at random up to this one."""
    delay = backoff * 2.0**retry
    if retry_after:
        if retry_after.strip().isdigit():
            delay = float(retry_after)
        else:
            when = email.utils.parsedate_to_datetime(retry_after)  # ValueError if neither
            delay = when.timestamp() - time.time()
    return max(0.0, min(delay, MAX_DELAY_S))


_Outcome = httpx.Response | Exception


class _Retries:
    """One request's retry decisions: what the sync and async loops share
    (they keep only the sending and the waiting, as httpx keeps its I/O twice).

    Tried again: the failures in :data:`RETRY_ERRORS`, and the statuses in
    :data:`RETRY_STATUSES`; and a 409 that follows a failure in transit, when
    the request carries its own ``X-Request-Id``: the server refuses an id
    that a request in flight holds, and that request is most likely this
    one's own earlier try, which frees the id when it ends. A wait is the
    server's ``Retry-After`` when it sends one, else drawn at random up to
    :func:`retry_delay` ("full jitter"), so that clients refused together
    do not come back together.
    """

    def __init__(self, retries: int, backoff: float, rng: random.Random | None = None) -> None:
        self.retries, self.backoff, self.retry = retries, backoff, 0
        self.rng = rng or _RANDOM
        self.in_doubt = False  # an earlier try failed in transit: it may still run

    def _retryable(self, outcome: _Outcome) -> bool:
        if isinstance(outcome, httpx.Response):
            return outcome.status_code in RETRY_STATUSES or (
                outcome.status_code == 409
                and self.in_doubt
                and "x-request-id" in outcome.request.headers
            )
        return isinstance(outcome, RETRY_ERRORS)

    def delay(self, outcome: _Outcome) -> float | None:
        """Seconds to wait before the next try, or None: ``outcome`` is final."""
        if self.retry >= self.retries or not self._retryable(outcome):
            return None
        self.in_doubt = self.in_doubt or isinstance(outcome, Exception)
        self.retry += 1
        after = outcome.headers.get("retry-after") if isinstance(outcome, httpx.Response) else None
        if after:
            try:
                return retry_delay(self.retry - 1, self.backoff, after)
            except ValueError:  # a Retry-After that is neither seconds nor a date
                pass
        return self.rng.uniform(0.0, retry_delay(self.retry - 1, self.backoff))


_RANDOM = random.Random()


def _final(outcome: _Outcome) -> httpx.Response:
    """The response, or the transport error raised."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _dense_only(options: EmbedOptions) -> EmbedOptions:
    for name in ("return_dense", "return_sparse", "return_tokens", "return_colbert_vecs"):
        if name in options:
            raise TypeError(f"embed_dense() sets {name} itself; use embed() for other outputs")
    # base64 unless the caller asks otherwise: 5.3 bytes a value on the wire,
    # against about 20 as JSON numbers, and the same float32 values.
    return {"encoding_format": "base64", **options, "return_dense": True, "return_sparse": False}


def _dense_of(response: SparseEmbeddingResponse) -> list[list[float]]:
    dense = [item.dense_array() for item in response.data]
    if any(vector is None for vector in dense):
        raise SparseEmbeddingError("the server sent no dense vector, though return_dense was asked")
    return [vector.tolist() for vector in dense if vector is not None]


def _score_bodies(
    model: str | None,
    texts: dict[str, Any],
    weights: Sequence[float] | None,
    max_query_length: int | None,
    max_passage_length: int | None,
    modes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The scoring requests' bodies for ``texts`` (``query`` and
    ``documents``, or ``pairs``): ``ADAPTER_BATCH_SIZE`` documents or pairs
    each, checked with the server's own schema before any is sent."""
    data = {
        **{k: list(v) if isinstance(v, (list, tuple)) else v for k, v in texts.items()},
        "weights": list(weights) if weights is not None else None,
        "max_query_length": max_query_length,
        "max_passage_length": max_passage_length,
        "modes": list(modes) if modes is not None else None,
    }
    try:
        request = ScoreRequest.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as exc:
        message, field = describe_validation_error(exc)
        raise SparseEmbeddingError(message, param=field) from None
    batched = "pairs" if request.pairs is not None else "documents"
    items = getattr(request, batched)
    bodies = []
    for start in range(0, len(items), ADAPTER_BATCH_SIZE):
        batch = items[start : start + ADAPTER_BATCH_SIZE]
        body: dict[str, Any] = {
            "data": request.model_copy(update={batched: batch}).model_dump(exclude_none=True)
        }
        if model is not None:
            body["model"] = model
        bodies.append(body)
    return bodies


def _scores_of(results: Sequence[ScoreResult]) -> list[dict[str, float]]:
    return [item.scores for result in results for item in result.data]


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
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF_S,
    ) -> None:
        if retries < 0 or backoff < 0:
            raise ValueError(f"retries and backoff must be >= 0, got {retries} and {backoff}")
        self.model = model
        self.retries = retries
        self.backoff = backoff
        self._url = base_url.rstrip("/") + "/pooling"
        # Sent with each request, so that they apply to a caller's http_client too.
        self._headers = dict(headers or {})
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        if http_client is None:
            self._http = self._http_class(
                timeout=timeout, limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
            )
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

    def _retries(self) -> _Retries:
        return _Retries(self.retries, self.backoff)

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
    ) -> PoolingResult:
        """Embed a text, a list of texts, or token ids; see :class:`EmbedOptions`.

        Connection failures and 503s are tried again ``retries`` times, after
        :func:`retry_delay`; the last one raises (httpx's exception, or
        :class:`SparseEmbeddingError` for a status).
        """
        body, request_id = _prepare(self.model, input, options)
        return _parse_response(self._post(body, request_id), PoolingResult)

    def _post(self, body: dict[str, Any], request_id: str | None = None) -> httpx.Response:
        """POST /pooling, with the retries; the last failure raises."""
        headers, retries = self._request_headers(request_id), self._retries()
        while True:
            try:
                outcome: _Outcome = self._http.post(self._url, json=body, headers=headers)
            except httpx.TransportError as exc:
                outcome = exc
            delay = retries.delay(outcome)
            if delay is None:
                return _final(outcome)
            time.sleep(delay)

    def embed_dense(self, input: Input, **options: Unpack[EmbedOptions]) -> list[list[float]]:
        """BGE-M3's dense vectors (CLS, normalised), one per input, from ``/pooling``."""
        return _dense_of(self.embed(input, **_dense_only(options)))

    def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        weights: Sequence[float] | None = None,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        modes: Sequence[str] | None = None,
    ) -> list[dict[str, float]]:
        """FlagEmbedding's ``compute_score`` for ``query`` against each of
        ``documents``: one dict per document, in their order, with the keys
        ``colbert``, ``sparse``, ``dense``, ``sparse+dense`` and
        ``colbert+sparse+dense``; ``weights`` are ``[w_dense, w_sparse,
        w_colbert]`` (``[1, 1, 1]`` by default). The server scores (the
        request's ``query`` and ``documents``), ``ADAPTER_BATCH_SIZE``
        documents per request; the query is cut at ``max_query_length``
        tokens (``DEFAULT_MAX_QUERY_LENGTH`` by default), each document at
        ``max_passage_length`` (the model's length by default). ``modes``
        (of those keys) asks for some of them alone: without ``colbert`` and
        ``colbert+sparse+dense``, the server computes no ColBERT vector."""
        if not isinstance(documents, str) and len(documents) == 0:
            return []
        bodies = _score_bodies(
            self.model,
            {"query": query, "documents": documents},
            weights,
            max_query_length,
            max_passage_length,
            modes,
        )
        return _scores_of([_parse_response(self._post(body), ScoreResult) for body in bodies])

    def score_pairs(
        self,
        pairs: Sequence[tuple[str, str]],
        *,
        weights: Sequence[float] | None = None,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        modes: Sequence[str] | None = None,
    ) -> list[dict[str, float]]:
        """:meth:`score` for ``(query, passage)`` pairs: ``compute_score``'s
        own input, one dict per pair, in their order."""
        if len(pairs) == 0:
            return []
        bodies = _score_bodies(
            self.model,
            {"pairs": [list(pair) for pair in pairs]},
            weights,
            max_query_length,
            max_passage_length,
            modes,
        )
        return _scores_of([_parse_response(self._post(body), ScoreResult) for body in bodies])

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
    ) -> PoolingResult:
        """See :meth:`SparseEmbeddingClient.embed`."""
        body, request_id = _prepare(self.model, input, options)
        return _parse_response(await self._post(body, request_id), PoolingResult)

    async def _post(self, body: dict[str, Any], request_id: str | None = None) -> httpx.Response:
        """See :meth:`SparseEmbeddingClient._post`."""
        headers, retries = self._request_headers(request_id), self._retries()
        while True:
            try:
                outcome: _Outcome = await self._http.post(self._url, json=body, headers=headers)
            except httpx.TransportError as exc:
                outcome = exc
            delay = retries.delay(outcome)
            if delay is None:
                return _final(outcome)
            await asyncio.sleep(delay)

    async def embed_dense(self, input: Input, **options: Unpack[EmbedOptions]) -> list[list[float]]:
        """See :meth:`SparseEmbeddingClient.embed_dense`."""
        return _dense_of(await self.embed(input, **_dense_only(options)))

    async def score(
        self,
        query: str,
        documents: Sequence[str],
        *,
        weights: Sequence[float] | None = None,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        modes: Sequence[str] | None = None,
        concurrency: int = DEFAULT_SCORE_CONCURRENCY,
    ) -> list[dict[str, float]]:
        """See :meth:`SparseEmbeddingClient.score`; at most ``concurrency``
        requests are in flight at once, and when one fails (after its
        retries) the others are cancelled and its error is raised."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if not isinstance(documents, str) and len(documents) == 0:
            return []
        bodies = _score_bodies(
            self.model,
            {"query": query, "documents": documents},
            weights,
            max_query_length,
            max_passage_length,
            modes,
        )
        slots = asyncio.Semaphore(concurrency)

        async def one(body: dict[str, Any]) -> ScoreResult:
            async with slots:
                return _parse_response(await self._post(body), ScoreResult)

        tasks = [asyncio.ensure_future(one(body)) for body in bodies]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return _scores_of(results)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSparseEmbeddingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
