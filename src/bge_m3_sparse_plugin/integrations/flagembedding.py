"""FlagEmbedding's ``BGEM3FlagModel``, backed by vLLM: code written for it
runs with one line changed::

    # from FlagEmbedding import BGEM3FlagModel
    from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel

    model = BGEM3FlagModel("BAAI/bge-m3", use_fp16=True)
    output = model.encode(["What is BGE M3?"], return_dense=True, return_sparse=True)

The constructor takes FlagEmbedding 1.4's arguments with their meaning, and
either ``base_url=`` (and ``api_key=``) for a running server with the plugin,
or keywords of ``vllm.LLM`` for the engine it starts in this process (the
default: the plugin's one-pass model, at the precision ``use_fp16`` /
``use_bf16`` ask for, ``_precision``'s rule on a CPU). An argument with no
equivalent here is refused (:class:`~.._exceptions.UnsupportedArgument`,
which names it), never ignored. The methods have FlagEmbedding's signatures,
defaults and return types (``_m3_results``); docs/migrating.md lists what
differs. The engine stops with :meth:`close`, at the end of a ``with``
block, or when the object is collected or the program exits.

Texts are tokenized here, by the model's own tokenizer, and cut at
``max_length`` exactly as FlagEmbedding cuts them; the plugin gets token ids.
"""

from __future__ import annotations

import logging
import os
import weakref
from typing import Any

from .._config import (
    BASE_URL_ENV,
    DEFAULT_TIMEOUT_S,
    VLLM_API_KEY_ENV,
    max_inputs,
)
from .._config import Limits as _Limits
from .._exceptions import UnsupportedArgument
from .._precision import choose_precision, cpu_flags
from .._prompts import tokenize
from . import _m3_results as results
from ._m3_backends import Backend, LocalBackend, RemoteBackend

__all__ = ["BGEM3FlagModel", "UnsupportedArgument", "engine_dtype"]

logger = logging.getLogger(__name__)

# Keywords of vllm.LLM that the class sets itself.
_SET_HERE = {
    "model": "model_name_or_path",
    "dtype": "use_fp16 / use_bf16",
    "runner": "the class (pooling)",
    "hf_overrides": "the class (the plugin's one-pass model)",
    "io_processor_plugin": "the class (the plugin)",
    "trust_remote_code": "trust_remote_code",
    "download_dir": "cache_dir",
}
# FlagEmbedding's own keyword arguments (its **kwargs) that have a meaning
# here, and their defaults.
_FLAG_KWARGS = {"passage_instruction_for_retrieval": None, "passage_instruction_format": "{}{}"}


def _checked_devices(devices: Any, gpu: bool, remote: bool) -> None:
    """``devices`` as FlagEmbedding takes them, where they name the one device
    the engine runs on; refused otherwise, with what to do instead."""
    if devices is None:
        return
    if remote:
        # pymilvus-model's code passes device="cpu" as a matter of course: not
        # refused, since the server's devices are the server's, but said.
        logger.warning(
            "devices=%r is not used: base_url= sends the work to a server, which runs on "
            "its own devices",
            devices,
        )
        return
    listed = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    if len(listed) != 1:
        raise UnsupportedArgument(
            "devices",
            f"{devices!r} names {len(listed)} devices; one engine here runs on one. For several "
            "GPUs, serve with vllm serve ... --data-parallel-size N and pass base_url=",
        )
    (device,) = listed
    name = f"cuda:{device}" if isinstance(device, int) else str(device)
    if name == "cpu" and not gpu:
        return
    if gpu and name in ("cuda", "cuda:0"):
        return
    where = "a GPU" if gpu else "a CPU (no GPU is visible)"
    raise UnsupportedArgument(
        "devices",
        f"{devices!r}: vLLM runs here on {where}, its first device; choose a GPU with "
        "CUDA_VISIBLE_DEVICES before the program starts",
    )


def _check_flag_arguments(**arguments: Any) -> None:
    """FlagEmbedding's arguments that have one meaning here, or none."""
    if arguments["normalize_embeddings"] is not True:
        raise UnsupportedArgument(
            "normalize_embeddings",
            "the plugin returns normalised dense and ColBERT vectors only, as bge-m3 is used; "
            "an unnormalised vector cannot be made from a normalised one",
        )
    if arguments["pooling_method"] != "cls":
        raise UnsupportedArgument(
            "pooling_method",
            f"{arguments['pooling_method']!r}: bge-m3's dense vector is its CLS vector",
        )
    if arguments["colbert_dim"] != -1:
        raise UnsupportedArgument(
            "colbert_dim",
            f"{arguments['colbert_dim']!r}: the ColBERT vectors are the model's own width (-1)",
        )
    for name in ("batch_size", "query_max_length", "passage_max_length", "truncate_dim"):
        value = arguments[name]
        if name == "truncate_dim" and value is None:
            continue
        if type(value) is not int or value < 1:
            raise UnsupportedArgument(name, f"must be an integer >= 1, got {value!r}")


def _given(value: int | None, default: int) -> int:
    """FlagEmbedding's ``if x is None: x = self.x``."""
    return default if value is None else value


def _refuse_any(kwargs: dict[str, Any], why: str) -> None:
    """Refuse the first of ``kwargs`` by name."""
    if kwargs:
        raise UnsupportedArgument(next(iter(kwargs)), why)


def engine_dtype(use_fp16: bool, use_bf16: bool, gpu: bool, cpu_flags: frozenset[str]) -> str:
    """vLLM's dtype for FlagEmbedding's flags: bfloat16 for use_bf16; float32
    for neither; for use_fp16 the package's rule (``_precision``): vLLM's
    auto (float16) on a GPU; on a CPU, bfloat16 where it has the
    instructions, float32 elsewhere (FlagEmbedding itself runs float32 on a
    CPU, whatever use_fp16 says)."""
    if use_bf16:
        return "bfloat16"
    if not use_fp16:
        return "float32"
    return choose_precision(None, gpu, cpu_flags).dtype


class BGEM3FlagModel:
    """``FlagEmbedding.BGEM3FlagModel`` (1.4), on vLLM with the plugin."""

    # FlagEmbedding's attributes, which its methods (and code around them) read.
    model_name_or_path: str
    normalize_embeddings: bool
    use_fp16: bool
    use_bf16: bool
    query_instruction_for_retrieval: str | None
    query_instruction_format: str
    passage_instruction_for_retrieval: str | None
    passage_instruction_format: str
    batch_size: int
    query_max_length: int
    passage_max_length: int
    return_dense: bool
    return_sparse: bool
    return_colbert_vecs: bool
    truncate_dim: int | None

    def __init__(
        self,
        model_name_or_path: str,
        normalize_embeddings: bool = True,
        use_fp16: bool = True,
        use_bf16: bool = False,
        query_instruction_for_retrieval: str | None = None,
        query_instruction_format: str = "{}{}",
        devices: str | int | list[str] | list[int] | None = None,
        pooling_method: str = "cls",
        trust_remote_code: bool = False,
        cache_dir: str | None = None,
        colbert_dim: int = -1,
        batch_size: int = 256,
        query_max_length: int = 512,
        passage_max_length: int = 512,
        return_dense: bool = True,
        return_sparse: bool = False,
        return_colbert_vecs: bool = False,
        truncate_dim: int | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        from transformers import AutoTokenizer

        from ..index._model_info import model_config, on_gpu

        given = dict(locals())  # the arguments, by name
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV) or None
        if api_key is None:
            api_key = os.environ.get(VLLM_API_KEY_ENV) or None
        remote = base_url is not None
        gpu = False if remote else on_gpu()
        _check_flag_arguments(**given)
        _checked_devices(devices, gpu, remote)
        for name, default in _FLAG_KWARGS.items():
            given[name] = kwargs.pop(name, default)
        if kwargs.pop("convert_to_numpy", True) is not True:
            raise UnsupportedArgument("convert_to_numpy", "the results are numpy arrays")
        settings = self._engine_settings(
            kwargs, remote, use_fp16, use_bf16, trust_remote_code, cache_dir
        )
        for name in self.__annotations__:  # FlagEmbedding's attributes, declared above
            setattr(self, name, given[name])
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_name_or_path, trust_remote_code=trust_remote_code, cache_dir=cache_dir
        )
        self.hidden_size = int(model_config(model_name_or_path)["hidden_size"])
        self._dtype = results.result_dtype(use_fp16, use_bf16, gpu)
        self._limits = _Limits.from_env()
        self._backend: Backend = (
            RemoteBackend(base_url, api_key, timeout)
            if base_url is not None
            else LocalBackend(model_name_or_path, settings)
        )
        self._closer = weakref.finalize(self, self._backend.close)

    @staticmethod
    def _engine_settings(
        kwargs: dict[str, Any],
        remote: bool,
        use_fp16: bool,
        use_bf16: bool,
        trust_remote_code: bool,
        cache_dir: str | None,
    ) -> dict[str, Any]:
        """The engine's settings: FlagEmbedding's flags, and ``kwargs``, which
        must each be a keyword of ``vllm.LLM`` that the class does not set."""
        if remote:
            _refuse_any(
                kwargs,
                "not an argument of FlagEmbedding's BGEM3FlagModel, nor one here with "
                "base_url= (vllm.LLM's keywords are for the engine in this process)",
            )
            return {}
        from .._llm import engine_arguments
        from ..index._model_info import on_gpu

        known = engine_arguments()
        for name in kwargs:
            if name in _SET_HERE:
                raise UnsupportedArgument(name, f"set by {_SET_HERE[name]}")
            if name not in known:
                raise UnsupportedArgument(
                    name, "not an argument of FlagEmbedding's BGEM3FlagModel, nor of vllm.LLM"
                )
        settings = dict(kwargs)
        settings["dtype"] = engine_dtype(use_fp16, use_bf16, on_gpu(), cpu_flags())
        if trust_remote_code:
            settings["trust_remote_code"] = True
        if cache_dir is not None:
            settings["download_dir"] = cache_dir
        return settings

    # -- the engine's lifetime --------------------------------------------------------

    def close(self) -> None:
        """Stop the engine (or close the client); the object is done."""
        self._closer()

    stop_self_pool = close  # FlagEmbedding's name for it

    def __enter__(self) -> BGEM3FlagModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- encode -------------------------------------------------------------------------

    def _token_ids(
        self, texts: list[str], max_length: int, tokenizer_kwargs: dict[str, Any]
    ) -> list[list[int]]:
        _refuse_any(
            tokenizer_kwargs,
            "not an argument of encode here (FlagEmbedding passes it to the tokenizer)",
        )
        return tokenize(self.tokenizer, texts, max_length)

    def encode(
        self,
        sentences: list[str] | str,
        batch_size: int | None = None,
        max_length: int | None = None,
        return_dense: bool | None = None,
        return_sparse: bool | None = None,
        return_colbert_vecs: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """FlagEmbedding's ``encode``: ``dense_vecs``, ``lexical_weights`` and
        ``colbert_vecs`` (None where not asked) of ``sentences``."""
        instruction = kwargs.pop("instruction", None)
        fmt = kwargs.pop("instruction_format", None) or "{}{}"
        if kwargs.pop("convert_to_numpy", True) not in (True, None):
            raise UnsupportedArgument("convert_to_numpy", "the results are numpy arrays")
        wants = (
            self.return_dense if return_dense is None else return_dense,
            self.return_sparse if return_sparse is None else return_sparse,
            self.return_colbert_vecs if return_colbert_vecs is None else return_colbert_vecs,
        )
        single = isinstance(sentences, str)
        texts = results.with_instruction(sentences, instruction, fmt)
        texts = [texts] if isinstance(texts, str) else list(texts)
        token_ids = self._token_ids(texts, _given(max_length, self.passage_max_length), kwargs)
        if not any(wants):
            raise ValueError(  # FlagEmbedding's words (its model asserts them)
                "Must choose one or more from `return_colbert_vecs`, `return_sparse`, "
                "`return_dense` to set `True`!"
            )
        items = []
        for part in self._batches(token_ids, _given(batch_size, self.batch_size), wants[2]):
            items.extend(self._backend.embed(token_ids[part], wants))
        return results.encode_result(
            items, wants, single, self._dtype, self.truncate_dim, self.hidden_size
        )

    def _batches(self, token_ids: list[list[int]], batch_size: int, colbert: bool) -> list[slice]:
        """Requests of at most ``batch_size`` inputs (and the server's cap), and
        with ColBERT, of at most the ColBERT values one request may hold."""
        width = self.hidden_size if colbert else 0  # ColBERT: a vector per token but <s>
        costs = [(len(ids) - 1) * width for ids in token_ids]
        return results.chunks(costs, min(batch_size, max_inputs()), self._limits.max_colbert_values)

    def encode_queries(
        self,
        queries: list[str] | str,
        batch_size: int | None = None,
        max_length: int | None = None,
        return_dense: bool | None = None,
        return_sparse: bool | None = None,
        return_colbert_vecs: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``encode`` of queries: cut at ``query_max_length``, with the
        query instruction."""
        return self.encode(
            queries,
            batch_size=batch_size,
            max_length=_given(max_length, self.query_max_length),
            return_dense=return_dense,
            return_sparse=return_sparse,
            return_colbert_vecs=return_colbert_vecs,
            instruction=self.query_instruction_for_retrieval,
            instruction_format=self.query_instruction_format,
            **kwargs,
        )

    def encode_corpus(
        self,
        corpus: list[str] | str,
        batch_size: int | None = None,
        max_length: int | None = None,
        return_dense: bool | None = None,
        return_sparse: bool | None = None,
        return_colbert_vecs: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``encode`` of passages: cut at ``passage_max_length``, with the
        passage instruction, if one was given."""
        return self.encode(
            corpus,
            batch_size=batch_size,
            max_length=_given(max_length, self.passage_max_length),
            return_dense=return_dense,
            return_sparse=return_sparse,
            return_colbert_vecs=return_colbert_vecs,
            instruction=self.passage_instruction_for_retrieval,
            instruction_format=self.passage_instruction_format,
            **kwargs,
        )

    # -- scores -------------------------------------------------------------------------

    def compute_score(
        self,
        sentence_pairs: list[tuple[str, str]] | tuple[str, str],
        batch_size: int | None = None,
        max_query_length: int | None = None,
        max_passage_length: int | None = None,
        weights_for_different_modes: list[float] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """FlagEmbedding's ``compute_score``: the five keys for each pair (the
        plugin's server-side ``compute_score``), lists of floats, or floats for
        one pair."""
        _refuse_any(
            kwargs,
            "not an argument of compute_score here (FlagEmbedding passes it to the tokenizer)",
        )
        if isinstance(sentence_pairs, list) and len(sentence_pairs) == 0:
            return []  # type: ignore[return-value]  # FlagEmbedding's own answer
        single = isinstance(sentence_pairs[0], str)
        pairs = [tuple(sentence_pairs)] if single else [tuple(p) for p in sentence_pairs]
        cuts = (
            _given(max_query_length, self.query_max_length),
            _given(max_passage_length, self.passage_max_length),
        )
        weights = None if weights_for_different_modes is None else list(weights_for_different_modes)
        scores: list[dict[str, float]] = []
        for part in self._score_batches(pairs, cuts, _given(batch_size, self.batch_size)):
            scores.extend(self._backend.score(pairs[part], weights, cuts))  # type: ignore[arg-type]
        return results.score_result(scores, single)

    def _score_batches(
        self, pairs: list[tuple[Any, ...]], cuts: tuple[int, int], batch_size: int
    ) -> list[slice]:
        """Requests of at most ``batch_size`` pairs, each within the ColBERT
        values a request may hold (a score computes every pair's)."""
        queries = tokenize(self.tokenizer, [q for q, _ in pairs], cuts[0])
        passages = tokenize(self.tokenizer, [p for _, p in pairs], cuts[1])
        costs = [(len(q) - 1 + len(p) - 1) * self.hidden_size for q, p in zip(queries, passages)]
        return results.chunks(costs, min(batch_size, max_inputs()), self._limits.max_colbert_values)

    def compute_lexical_matching_score(self, lexical_weights_1: Any, lexical_weights_2: Any) -> Any:
        """The lexical matching score of two weight dicts, or the matrix of two lists."""
        return results.lexical_matching_score(lexical_weights_1, lexical_weights_2)

    def colbert_score(self, q_reps: Any, p_reps: Any) -> Any:
        """The ColBERT score of a query's vectors against a passage's."""
        return results.colbert_score(q_reps, p_reps)

    def convert_id_to_token(self, lexical_weights: Any) -> Any:
        """Lexical weights keyed by each token's text instead of its id."""
        return results.convert_id_to_token(lexical_weights, self.tokenizer.decode)

    def __repr__(self) -> str:
        where = "a server" if isinstance(self._backend, RemoteBackend) else "vLLM in this process"
        return f"BGEM3FlagModel({self.model_name_or_path!r}, on {where})"
