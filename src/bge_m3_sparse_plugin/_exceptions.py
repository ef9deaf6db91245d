"""Every exception the plugin raises of its own, in one place, under one base class.

As httpx's ``_exceptions.py``: a caller catches :class:`BgeM3Error` for any of
them, or one of its subclasses for one case::

    BgeM3Error
    ├── SparseEmbeddingError   the typed client: the server, or the client's own check
    │                          of the request, refused it (client.py)
    ├── RequestError           the server: a request refused before or after vLLM runs it;
    │                          the processor answers it with vLLM's 400 naming ``field``
    ├── IdInUse                the server: another request in flight holds this request id
    │                          (a 409)
    ├── TooManyPending         the server: the map of requests in flight is full (a 503)
    ├── OutputMismatch         bge-m3-sparse index: OUTPUT was made by a run with other settings
    ├── TableMismatch          bge-m3-sparse index: a sink's table exists with another shape
    └── SinkError              bge-m3-sparse index: a sink could not be opened or could not
                               load a shard; the message names the sink, never its password

Imports nothing beyond the standard library: the client, the server and the
index command all raise these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = [
    "BgeM3Error",
    "IdInUse",
    "OutputMismatch",
    "RequestError",
    "SinkError",
    "SparseEmbeddingError",
    "TableMismatch",
    "TooManyPending",
    "UnsupportedArgument",
]


class BgeM3Error(Exception):
    """The base class of every exception the plugin raises of its own."""


class SparseEmbeddingError(BgeM3Error):
    """A request the server (or the client's own check of it) refused.

    ``status_code`` is the HTTP status, or None when the client refused the
    request before sending it; ``message`` is the server's message and
    ``param`` the field it names, when it names one. As on
    ``httpx.HTTPStatusError``, ``response`` is the ``httpx.Response`` (None
    when nothing was sent) and ``request`` its request; ``body`` is the
    response's JSON.
    """

    def __init__(
        self,
        message: str,
        status_code: int | None = None,
        param: str | None = None,
        body: Any = None,
        response: httpx.Response | None = None,
    ) -> None:
        prefix = f"HTTP {status_code}: " if status_code is not None else ""
        super().__init__(prefix + message)
        self.message = message
        self.status_code = status_code
        self.param = param
        self.body = body
        self.response = response
        self.request = response.request if response is not None else None


class RequestError(BgeM3Error, ValueError):
    """A request the plugin refuses: a 400 whose ``param`` is ``field``."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class IdInUse(BgeM3Error):
    """Another request in flight holds this request id."""

    def __init__(self, request_id: str) -> None:
        super().__init__(request_id)
        self.request_id = request_id


class TooManyPending(BgeM3Error):
    """The map is full: ``max_size`` requests are in flight."""

    def __init__(self, max_size: int) -> None:
        super().__init__(max_size)
        self.max_size = max_size


class OutputMismatch(BgeM3Error):
    """The output folder was made by a run with other settings."""


class TableMismatch(BgeM3Error):
    """The sink's table exists with another shape."""


class SinkError(BgeM3Error):
    """The sink could not be opened or could not load a shard: the message
    names the sink (without its password) and what went wrong."""


class UnsupportedArgument(BgeM3Error, ValueError):
    """A drop-in class (``integrations.flagembedding``, ``integrations.milvus``)
    was given an argument, or a value of one, that it has no equivalent for:
    refused rather than ignored. ``argument`` is its name, which the message
    starts with."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
