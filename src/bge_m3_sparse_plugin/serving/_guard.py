"""Make vLLM's ``--api-key`` guard every route that runs the model.

vLLM's ``AuthenticationMiddleware`` checks the key only on paths under its
module-level ``GUARDED_PREFIX`` (``/v1``, ``/v2``, ``/inference``,
``/cohere`` in each release of ``SUPPORTED_VLLM``). The plugin's ``/pooling``
is outside them, and so are vLLM's own ``/invocations`` (SageMaker's route,
which hands a plugin body to the plugin), ``/score`` and ``/rerank``: with
``--api-key`` set, each answered anyone.

The rule added here is derived from the routes the app really has, not from a
list of paths: a request whose path matches any of the app's routes must carry
the key, unless that route is one of :data:`OPEN_ROUTES`, which run no model
and which vLLM leaves open. A route that a later vLLM adds is guarded too.
Paths that match no route (404s) keep vLLM's own rule.

How: the middleware class's ``__call__`` is wrapped once per process, from
the processor's constructor. Every API-server process (``--api-server-count
N`` included) builds its own processor before it serves, so each guards its
own routes. Starlette puts the app in each request's scope (``scope["app"]``),
so the wrapper needs nothing remembered. The rest stays vLLM's: its
constant-time comparison, its 401 body, ``--api-key`` and ``VLLM_API_KEY``
with vLLM's precedence, and no key configured means no middleware and so no
change. ``--middleware`` would be a flag for the user to remember, and vLLM
gives plugins no hook to wrap the app.

The middleware has lived in two modules (``serve.utils.server_utils`` before
``serve.middleware.authenticate``); both are looked for. If neither exists,
the plugin logs a warning rather than pretend the routes are guarded.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["MIDDLEWARE_MODULES", "OPEN_ROUTES", "guard_model_routes", "runs_model"]

logger = logging.getLogger("vllm.plugins.bge_m3_sparse_plugin.serving._guard")

# vLLM's routes that run no model and that it leaves open without a key:
# probes, metrics, the version, the tokenizer, and FastAPI's own docs.
OPEN_ROUTES = frozenset(
    {
        "/health",
        "/ping",
        "/metrics",
        "/version",
        "/load",
        "/tokenize",
        "/detokenize",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
    }
)
MIDDLEWARE_MODULES = (
    "vllm.entrypoints.serve.middleware.authenticate",  # where vLLM has it since 0.29
    "vllm.entrypoints.serve.utils.server_utils",  # earlier
)
_WRAPPED = "_bge_m3_sparse_guards_model_routes"


def runs_model(scope: dict[str, Any]) -> bool:
    """Whether the request's path is one of the app's routes outside :data:`OPEN_ROUTES`."""
    from starlette.routing import Match

    # PARTIAL: the path is the route's and the method is not (a 405): guarded too.
    return any(
        route.matches(scope)[0] is not Match.NONE
        and getattr(route, "path", None) not in OPEN_ROUTES
        for route in getattr(scope.get("app"), "routes", ())
    )


def guard_model_routes() -> str | None:
    """Make vLLM's API-key middleware check the key on every route that runs
    the model (:func:`runs_model`), besides vLLM's own prefixes.

    Returns the name of the module whose middleware now does so, or None
    when no vLLM middleware was found.
    """
    for name in MIDDLEWARE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        middleware = getattr(module, "AuthenticationMiddleware", None)
        if middleware is None or not hasattr(middleware, "verify_token"):
            continue
        if not getattr(middleware, _WRAPPED, False):
            middleware.__call__ = _wrap(middleware.__call__)
            setattr(middleware, _WRAPPED, True)
            logger.info(
                "bge_m3_sparse_plugin: an API key, when configured, now guards every "
                "route that runs the model (all but %s)",
                ", ".join(sorted(OPEN_ROUTES)),
            )
        return name
    logger.warning(
        "bge_m3_sparse_plugin: vLLM's API-key middleware was not found in %s; "
        "--api-key may not guard /pooling or /invocations on this vLLM. Put the server "
        "behind a proxy that checks the key",
        " or ".join(MIDDLEWARE_MODULES),
    )
    return None


def _wrap(call: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    def guarded_call(self: Any, scope: dict[str, Any], receive: Any, send: Any) -> Awaitable[None]:
        if (
            scope["type"] in ("http", "websocket")
            and scope.get("method") != "OPTIONS"
            and runs_model(scope)
        ):
            from starlette.datastructures import Headers
            from starlette.responses import JSONResponse

            if not self.verify_token(Headers(scope=scope)):
                # vLLM's own refusal, body and status alike.
                return JSONResponse(content={"error": "Unauthorized"}, status_code=401)(
                    scope, receive, send
                )
        return call(self, scope, receive, send)

    return guarded_call
