"""The vLLM IO processor: the glue between vLLM and the plugin's pure parts.

parse (schemas.py) -> tasks, checks and prompts (_tasks.py, _checks.py,
_prompts.py) -> vLLM -> response items (_embeddings.py) or scores
(_scores.py). Per-request options wait in between: online in a map of the
requests in flight, keyed by request id (_pending.py, which says why);
offline, where ``LLM.encode`` calls both steps in the caller's thread, in a
context variable."""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, cast

from pydantic import ValidationError
from vllm.config import VllmConfig
from vllm.exceptions import GracefulHTTPError, VLLMValidationError
from vllm.inputs import PromptType
from vllm.outputs import PoolingRequestOutput
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.pooling_params import PoolingParams
from vllm.renderers import BaseRenderer

from .._checks import (
    check_colbert_values,
    check_counts,
    check_dimensions,
    check_lengths,
    check_limits,
)
from .._config import (
    MAX_PENDING_ENV,
    ONE_PASS_ARCHITECTURE,
    VLLM_ARCHITECTURE,
    Limits,
    hf_overrides_flag,
)
from .._embeddings import (
    Model,
    colbert_values,
    embedding_items,
)
from .._exceptions import IdInUse, RequestError, TooManyPending
from .._model_length import max_tokens
from .._prompts import prompts_for
from .._sparse import start_compiling
from .._tasks import (
    COLBERT_KWARG,
    COLBERT_TASK,
    DEFAULT_TASK,
    ONE_PASS_TASK,
    Wants,
    tasks_for,
)
from .._tokens import TokenDecoder, special_token_ids
from ..schemas import (
    ScoreRequest,
    ScoreResponse,
    SparseEmbeddingRequest,
    SparseEmbeddingResponse,
    SparseEmbeddingUsage,
    describe_validation_error,
    is_score_request,
)
from ._guard import guard_model_routes
from ._metrics import set_pending
from ._offload import REQUEST_TASK, offload_preprocessing
from ._pending import PendingRequests
from ._score_route import ScoreOptions, score_prompts, score_response
from ._top_level import check_top_level_fields

__all__ = ["BgeM3SparseProcessor"]


# A child of the "vllm" logger: our lines go where vLLM's go, at its level.
logger = logging.getLogger("vllm.plugins." + __name__)


@dataclass(frozen=True)
class _Options:
    # The request as parsed, its input dropped: the texts can be large, and
    # only the options are needed after pre_process.
    request: SparseEmbeddingRequest
    single: bool  # the input was one text or one id list: errors say data.input
    tasks: tuple[str, ...]  # the pooling tasks its prompts ran, one run of inputs each


Request = SparseEmbeddingRequest | ScoreRequest
Response = SparseEmbeddingResponse | ScoreResponse


# Offline, LLM.encode runs pre_process and post_process in the caller's
# thread, one call after the other: a context variable carries the options
# (each thread has its own), and a call that failed in between is simply
# overwritten by the next one.
_offline_options: contextvars.ContextVar[_Options | ScoreOptions | None] = contextvars.ContextVar(
    "bge_m3_sparse_offline_options", default=None
)

# Each prompt's pooling task, from pre_process to merge_pooling_params. vLLM
# calls the two one after the other in one function (online in the request's
# own asyncio task, offline in the caller's thread), so a context variable
# holds the request's tasks and no other request sees them.
_prompt_tasks: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "bge_m3_sparse_prompt_tasks", default=None
)


class _PerPromptParams(list[PoolingParams]):
    """One PoolingParams per prompt, for a request whose prompts run two
    pooling tasks (ColBERT beside sparse or dense).

    vLLM's front end (each release in ``SUPPORTED_VLLM``) asks
    ``merge_pooling_params`` once per /pooling request and takes one
    PoolingParams for every prompt or a sequence of them, one per prompt
    (``_params_to_seq``); before that it reads ``.task`` and calls
    ``.verify`` on what it got.
    """

    @property
    def task(self) -> Any:
        return self[0].task

    def verify(self, model_config: Any) -> None:
        for params in self:
            params.verify(model_config)


class BgeM3SparseProcessor(IOProcessor[Request, Response]):
    """Serves BGE-M3's lexical weights, dense vector and ColBERT vectors,
    each request from the pooling task that gives what it asks (``tasks_for``),
    whatever task the server was started with; and, for a ``data`` with
    query and documents or pairs, FlagEmbedding's ``compute_score``.

    On the plugin's model (``BgeM3OnePassModel``, ``_one_pass.py``) all three
    come from one pass of each input; on another (vLLM's
    BgeM3EmbeddingModel), ColBERT beside sparse or dense is a second pass,
    and the log says so once (``_loaded_as_one_pass``, ``one_pass``).

    Per-request options travel from ``pre_process`` to ``post_process``: online
    in a map of the requests in flight keyed by request id, which refuses a
    second request in flight with the same id (409); offline, where vLLM
    passes no id, in a context variable.
    """

    def __init__(self, vllm_config: VllmConfig, renderer: BaseRenderer) -> None:
        super().__init__(vllm_config, renderer)
        # Each API-server process builds its own processor before it serves:
        # from here on, --api-key guards /pooling, /invocations and every other
        # route that runs the model (_guard.py says why here), and requests to
        # the plugin are parsed and their prompts built in a worker thread, off
        # the event loop (_offload.py), each top-level field checked against
        # its kind (_top_level.py).
        guard_model_routes()
        check_top_level_fields()
        offload_preprocessing(lambda processor: isinstance(processor, BgeM3SparseProcessor))
        model_config = vllm_config.model_config
        hf_config = model_config.hf_config
        tokenizer = renderer.get_tokenizer()
        self.tokenizer = tokenizer
        # A score's texts are cut by the plugin, and a tokenizer's cut is state
        # it keeps between calls: the plugin cuts with its own copy, one call at
        # a time, while vLLM's renderer threads tokenize with theirs.
        self._cutting_tokenizer = _own_copy(tokenizer)
        self._cutting = threading.Lock()
        self.max_tokens = max_tokens(model_config)
        if self.max_tokens < model_config.max_model_len:
            logger.warning(
                "bge_m3_sparse_plugin: the model has %d positions but max_model_len is "
                "%d; start vLLM with --max-model-len %d so that it refuses longer "
                "prompts before running them (the plugin refuses their results)",
                self.max_tokens,
                model_config.max_model_len,
                self.max_tokens,
            )
        self.vocab_size = max(int(model_config.get_vocab_size()), len(tokenizer))
        # The compiled lexical-weight pass is built (or loaded from numba's
        # cache) while the server starts; requests before it is ready take
        # the numpy path, which gives the same result.
        start_compiling()
        self.model = Model(
            hidden_size=int(hf_config.hidden_size),
            bos_token_id=int(hf_config.bos_token_id),
            eos_token_id=int(hf_config.eos_token_id),
            skip_ids=special_token_ids(tokenizer),
            decode=TokenDecoder(tokenizer).decode,
        )
        self.limits = Limits.from_env()
        # Whether the engine pools all three in one pass: False at once for
        # another architecture; for the plugin's, read on first use
        # (``one_pass``), since the check imports vLLM's model code (half a
        # second, not spent on start-up).
        self._one_pass = None if _loaded_as_one_pass(model_config.architecture) else False
        self._checking = threading.Lock()
        self.pending: PendingRequests[_Options | ScoreOptions] = PendingRequests(
            self.limits.max_pending, on_change=set_pending
        )
        set_pending(0)  # on /metrics from the start, not from the first request

    @property
    def one_pass(self) -> bool:
        """Whether ColBERT beside sparse or dense comes from the same pass."""
        if self._one_pass is None:
            with self._checking:
                if self._one_pass is None:
                    self._one_pass = _pieces_present()
        return self._one_pass

    def parse_data(self, data: object) -> Request:
        if isinstance(data, (SparseEmbeddingRequest, ScoreRequest)):
            return data
        if not isinstance(data, dict):
            raise VLLMValidationError(
                "data must be an object with an 'input' field (or, to score, 'query' and "
                f"'documents', or 'pairs'), got {type(data).__name__}",
                parameter="data",
            )
        schema = ScoreRequest if is_score_request(data) else SparseEmbeddingRequest
        with _as_400():
            check_counts(data, self.limits.max_inputs)
        try:
            return schema.model_validate(data)
        except ValidationError as exc:
            message, field = describe_validation_error(exc)
            raise VLLMValidationError(message, parameter=field) from None

    def merge_pooling_params(self, params: PoolingParams | None = None) -> PoolingParams:
        # The task each prompt needs (pre_process chose it), with the
        # activations on (normalised dense and ColBERT, relu'd token weights).
        # Online (no params) vLLM asks once for the whole request; offline
        # once per prompt, in order.
        tasks = _prompt_tasks.get() or [DEFAULT_TASK]
        if params is not None:  # offline: this prompt's
            task = tasks.pop(0) if len(tasks) > 1 else tasks[0]
            return _with_task(params, task)
        _prompt_tasks.set(None)
        if len(set(tasks)) == 1:
            return _with_task(PoolingParams(), tasks[0])
        return cast(PoolingParams, _PerPromptParams(_with_task(PoolingParams(), t) for t in tasks))

    def pre_process(
        self,
        prompt: Request,
        request_id: str | None = None,
        **kwargs: Any,
    ) -> Sequence[PromptType]:
        if isinstance(prompt, ScoreRequest):
            return self._pre_score(prompt, request_id)
        wants = Wants(prompt.return_sparse, prompt.return_dense, prompt.return_colbert_vecs)
        inputs, single = prompt.inputs(), prompt.is_single()
        with _as_400():
            check_dimensions(prompt.dimensions, self.model.hidden_size)
            tasks = tasks_for(wants, wants.colbert and self.one_pass)  # checked when it matters
            check_limits(inputs, self.limits.max_inputs, self.limits.max_chars)
            prompts = prompts_for(inputs, single, self.vocab_size)
        options = _Options(
            request=prompt.model_copy(update={"input": ""}), single=single, tasks=tasks
        )
        return self._prompts(request_id, options, prompts, tasks)

    def _pre_score(self, request: ScoreRequest, request_id: str | None) -> Sequence[PromptType]:
        with _as_400():
            prompts, options = score_prompts(
                request,
                self._cutting_tokenizer,
                self._cutting,
                self.limits,
                self.model,
                self.max_tokens,
                self.one_pass,
            )
        return self._prompts(request_id, options, prompts, options.tasks)

    def _prompts(
        self,
        request_id: str | None,
        options: _Options | ScoreOptions,
        prompts: Sequence[Any],
        tasks: Sequence[str],
    ) -> list[PromptType]:
        """Keep ``options`` for ``post_process``, and give each prompt its tasks."""
        if request_id is None:  # offline: LLM.encode
            _offline_options.set(options)
        else:
            self._hold(request_id, options)
        # Each input runs once per task: all the inputs for the first, then
        # all of them for the next; post_process takes them back in runs.
        _prompt_tasks.set([task for task in tasks for _ in prompts])
        return cast(list[PromptType], list(prompts) * len(tasks))

    def _hold(self, request_id: str, options: _Options | ScoreOptions) -> None:
        """Keep ``options`` for ``post_process`` until the request ends."""
        try:
            self.pending.claim(request_id, options)
        except IdInUse:
            raise GracefulHTTPError(
                f"X-Request-Id {_header_value(request_id)!r} is in use by another request in "
                "flight on this server; send each concurrent request with its own X-Request-Id "
                "(or none, and vLLM makes one)",
                HTTPStatus.CONFLICT,
            ) from None
        except TooManyPending as exc:
            raise GracefulHTTPError(
                f"bge_m3_sparse_plugin holds {exc.max_size} requests in flight on this server "
                f"process, its limit ({MAX_PENDING_ENV}); retry later",
                HTTPStatus.SERVICE_UNAVAILABLE,
            ) from None

        # vLLM tells the plugin nothing when a request fails after
        # pre_process, so the end of the request's own asyncio task (answered,
        # failed inside vLLM, or abandoned by its client) is the one sure sign
        # that the id is free again. Off the loop (_offload.py), the task is
        # handed over, and told from its loop's thread.
        def free(_: object) -> None:
            self.pending.discard(request_id, options)

        handed = REQUEST_TASK.get()
        if handed is not None:
            loop, task = handed
            loop.call_soon_threadsafe(task.add_done_callback, free)
            return
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running event loop: the entry waits for post_process
            current = None
        if current is not None:
            current.add_done_callback(free)

    def post_process(
        self,
        model_output: Sequence[PoolingRequestOutput],
        request_id: str | None = None,
        **kwargs: Any,
    ) -> Response:
        if request_id is None:  # offline: LLM.encode
            options = _offline_options.get()
            _offline_options.set(None)
        else:
            options = self.pending.pop(request_id)
        if options is None:  # vLLM called post_process without pre_process
            raise RuntimeError(f"bge_m3_sparse_plugin has no options for request {request_id!r}")
        token_lists = [out.prompt_token_ids or [] for out in model_output]
        if isinstance(options, ScoreOptions):
            return score_response(
                token_lists, [o.outputs.data for o in model_output], options, self.model
            )
        inputs = token_lists[: len(token_lists) // len(options.tasks)]  # the first run
        with _as_400():
            check_lengths([len(ids) for ids in inputs], options.single, self.max_tokens)
        pooled = [out.outputs.data for out in model_output]
        if options.request.return_colbert_vecs:
            with _as_400():
                check_colbert_values(
                    colbert_values(token_lists, pooled, options.tasks, self.model),
                    self.limits.max_colbert_values,
                )
        items = embedding_items(token_lists, pooled, options.request, options.tasks, self.model)
        prompt_tokens = sum(map(len, inputs))
        return SparseEmbeddingResponse(
            data=items,
            usage=SparseEmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
        )


@contextmanager
def _as_400() -> Iterator[None]:
    """The plugin's refusals as vLLM's validation error: a 400 naming the field."""
    try:
        yield
    except RequestError as exc:
        raise VLLMValidationError(exc.message, parameter=exc.field) from None


def _own_copy(tokenizer: Any) -> Any:
    """A copy of vLLM's tokenizer for the plugin's own cuts; vLLM's itself
    where one cannot be made (each cut then races vLLM's threads, as before)."""
    try:
        return copy.deepcopy(tokenizer)
    except Exception:  # noqa: BLE001 -- a tokenizer that cannot be copied still tokenizes
        logger.warning(
            "bge_m3_sparse_plugin: vLLM's tokenizer (%s) cannot be copied; scores are cut "
            "with it, under the plugin's own lock",
            type(tokenizer).__name__,
        )
        return tokenizer


def _with_task(params: PoolingParams, task: str) -> PoolingParams:
    if task == ONE_PASS_TASK:  # the plugin's model: DEFAULT_TASK, ColBERT appended
        params.extra_kwargs = {**(params.extra_kwargs or {}), COLBERT_KWARG: True}
        task = DEFAULT_TASK
    params.task = cast(Any, task)  # one of BgeM3EmbeddingModel's pooling tasks
    params.use_activation = True
    return params


def _loaded_as_one_pass(architecture: str) -> bool:
    """Whether the engine's model is the plugin's one-pass architecture; if
    not, says so once in the log (each API-server process builds one processor)."""
    if architecture != ONE_PASS_ARCHITECTURE:
        logger.warning(
            "bge_m3_sparse_plugin: the model is loaded as %s, not %s: a request for ColBERT "
            "beside sparse or dense, and each score, runs its inputs twice (%s, then %s); "
            "serve with %s for one pass",
            architecture,
            ONE_PASS_ARCHITECTURE,
            DEFAULT_TASK,
            COLBERT_TASK,
            hf_overrides_flag(),
        )
        return False
    return True


def _pieces_present() -> bool:
    """Whether this vLLM has the pieces the one-pass model extends (the
    model's own check, ``_one_pass.missing``); if not, says so once."""
    try:
        from ._one_pass import missing  # vLLM's model code: imported only for this model
    except ImportError as exc:  # vLLM's BgeM3EmbeddingModel itself moved
        reason: str | None = f"the plugin's model cannot be imported ({exc})"
    else:
        reason = missing()
    if reason is not None:
        logger.warning(
            "bge_m3_sparse_plugin: %s; %s pools as %s, and a request for ColBERT beside "
            "sparse or dense, and each score, runs its inputs twice",
            reason,
            ONE_PASS_ARCHITECTURE,
            VLLM_ARCHITECTURE,
        )
        return False
    return True


def _header_value(request_id: str) -> str:
    """The X-Request-Id a client sent, from vLLM's ``pooling-<X-Request-Id>``."""
    return request_id.removeprefix("pooling-")
