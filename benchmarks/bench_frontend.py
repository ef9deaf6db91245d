"""The API server's own CPU per document, by request kind, beside vLLM's own
/v1/embeddings on the same server, in one run; and the plugin's share of it.

    python benchmarks/bench_frontend.py [--model small] [--docs 300] [--clients 8] [--rounds 3]

One server started as the README starts it (its `{"task": "embed"}` also
builds /v1/embeddings). Each kind sends --docs documents of 40-120 words, one
document a request, from --clients threads at once. The figure is the
API-server process's CPU seconds (psutil: user + system, all its threads; the
engine core is a process of its own) over the kind's requests, per document,
and the bytes of an answer. The kinds are interleaved round by round; the
median of the rounds is printed beside its ratio to /v1/embeddings' dense.
On a small model the engine costs little, so the figure is what bounds one
API-server process in front of a fast engine (a GPU).

Then it calls the plugin's own methods in this process, as vLLM's server
calls them (parse_data, pre_process, merge_pooling_params, post_process, and
the response model dumped), on outputs of the engine's layout, and prints
their CPU per document beside the server's: the plugin's own share. (A
sampling profiler was tried first: py-spy, non-blocking, recorded from 45 to
1,500 samples in runs of the same length here, too few and too erratic to
divide.)
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import documents, median, model_dir, print_settings
from _server import GPU_ARGS, SERVED_MODEL_NAME, BenchServer

from bge_m3_sparse_plugin._tasks import COLBERT_KWARG

VLLM_DENSE = "vLLM /v1/embeddings, dense"
KINDS: dict[str, tuple[str, dict]] = {
    VLLM_DENSE: ("/v1/embeddings", {}),
    "vLLM /v1/embeddings, dense, base64": ("/v1/embeddings", {"encoding_format": "base64"}),
    "plugin, sparse": ("/pooling", {}),
    "plugin, sparse + tokens": ("/pooling", {"return_tokens": True}),
    "plugin, sparse as indices_values": ("/pooling", {"sparse_format": "indices_values"}),
    "plugin, dense": ("/pooling", {"return_sparse": False, "return_dense": True}),
    "plugin, dense, base64": (
        "/pooling",
        {"return_sparse": False, "return_dense": True, "encoding_format": "base64"},
    ),
    "plugin, sparse + dense": ("/pooling", {"return_dense": True}),
    "plugin, all three": ("/pooling", {"return_dense": True, "return_colbert_vecs": True}),
    "plugin, all three, base64": (
        "/pooling",
        {"return_dense": True, "return_colbert_vecs": True, "encoding_format": "base64"},
    ),
}


def body(route: str, options: dict, doc: str) -> dict:
    if route == "/v1/embeddings":
        return {"model": SERVED_MODEL_NAME, "input": doc, **options}
    return {"model": SERVED_MODEL_NAME, "data": {"input": doc, **options}}


def send(url: str, route: str, options: dict, docs: list[str], clients: int) -> list[int]:
    """Every document, one a request, ``clients`` at once; each answer's bytes."""
    with httpx.Client(timeout=600) as http:

        def one(doc: str) -> int:
            resp = http.post(url + route, json=body(route, options, doc))
            resp.raise_for_status()
            return len(resp.content)

        with ThreadPoolExecutor(clients) as pool:
            return list(pool.map(one, docs))


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def plugin_work(path: Path, docs: list[str], kinds: dict[str, dict]) -> dict[str, float]:
    """The plugin's own CPU seconds per document for each kind: its methods
    called as vLLM's server calls them (parse_data, pre_process with a request
    id, merge_pooling_params, post_process), and its response model dumped as
    vLLM dumps it, on outputs laid out as the engine lays them out for this
    model (random values of the right lengths), in this process."""
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig
    from vllm.outputs import PoolingOutput, PoolingRequestOutput
    from vllm.plugins import load_general_plugins
    from vllm.plugins.io_processors import get_io_processor
    from vllm.renderers import renderer_from_config

    from bge_m3_sparse_plugin import HF_OVERRIDES, PLUGIN_NAME

    load_general_plugins()
    model_config = ModelConfig(
        model=str(path), runner="pooling", hf_overrides=HF_OVERRIDES, dtype="float32"
    )
    config = VllmConfig(model_config=model_config, device_config=DeviceConfig(device="cpu"))
    renderer = renderer_from_config(config)
    processor = get_io_processor(config, renderer, PLUGIN_NAME)
    tokenizer, hidden = renderer.get_tokenizer(), processor.model.hidden_size
    ids = [tokenizer(doc)["input_ids"] for doc in docs]
    rng = torch.Generator().manual_seed(0)

    def output(i: int, n: int, task: str, colbert: bool) -> PoolingRequestOutput:
        size = {"embed&token_classify": hidden + n - 2, "token_embed": (n - 1) * hidden}[task]
        size += (n - 1) * hidden if colbert else 0
        data = torch.rand(size, generator=rng)
        return PoolingRequestOutput(f"r{i}", PoolingOutput(data=data), ids[i], 0, True)

    seconds = {}
    for name, options in kinds.items():
        outputs = []
        for i, doc in enumerate(docs):  # the engine's side, made before the clock starts
            request = processor.parse_data({"input": doc, **options})
            processor.pre_process(prompt=request, request_id=f"warm-{i}")
            params = processor.merge_pooling_params()
            tasks = [p.task for p in params] if isinstance(params, list) else [params.task]
            colbert = bool((getattr(params, "extra_kwargs", None) or {}).get(COLBERT_KWARG))
            outputs.append([output(i, len(ids[i]), task, colbert) for task in tasks])
            processor.post_process(outputs[-1], request_id=f"warm-{i}")
        start = time.process_time()
        for i, doc in enumerate(docs):
            request = processor.parse_data({"input": doc, **options})
            processor.pre_process(prompt=request, request_id=f"r-{i}")
            processor.merge_pooling_params()
            response = processor.post_process(outputs[i], request_id=f"r-{i}")
            response.model_dump()
        seconds[name] = (time.process_time() - start) / len(docs)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", choices=["small", "mid", "wide"])
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="float16, 0.85 of the GPU's memory")
    args = parser.parse_args()
    path = model_dir(args.model)
    rng = random.Random(0)
    docs = [documents(1, rng.randint(40, 120), seed=i)[0] for i in range(args.docs)]
    print_settings(
        model=f"{args.model} ({path})", docs=args.docs, words="40-120", clients=args.clients
    )
    with tempfile.TemporaryDirectory(prefix="bf") as tmp:
        gpu = GPU_ARGS if args.gpu else []
        server = BenchServer(path, Path(tmp) / "server.log", gpu)  # the README's flags
        try:
            api = psutil.Process(server.pid)
            for route, options in KINDS.values():  # warm-up
                send(server.url, route, options, docs[:16], args.clients)
            cpu: dict[str, list[float]] = {name: [] for name in KINDS}
            size: dict[str, float] = {}
            for _ in range(args.rounds):
                for name, (route, options) in KINDS.items():
                    before = cpu_seconds(api)
                    sizes = send(server.url, route, options, docs, args.clients)
                    cpu[name].append((cpu_seconds(api) - before) / len(docs))
                    size[name] = sum(sizes) / len(sizes)
            base = median(cpu[VLLM_DENSE])
            print("API-server CPU per document (median of rounds), bytes per answer:")
            for name in KINDS:
                ms = median(cpu[name]) * 1000
                print(
                    f"  {name:<36} {ms:6.2f} ms  {median(cpu[name]) / base:5.2f}x vLLM's dense  "
                    f"{size[name]:10,.0f} B  (rounds: "
                    + ", ".join(f"{v * 1000:.2f}" for v in cpu[name])
                    + ")"
                )
            b64, floats = size["plugin, all three, base64"], size["plugin, all three"]
            print(f"  all three, base64 / float bytes: {b64 / floats:.3f}")
        finally:
            server.stop()
    plugin = {name: options for name, (route, options) in KINDS.items() if route == "/pooling"}
    own = plugin_work(path, docs, plugin)
    print("The plugin's own work per document (its methods, in this process), and its share:")
    for name in plugin:
        share = own[name] / median(cpu[name])
        print(f"  {name:<36} {own[name] * 1000:6.3f} ms  {share:6.1%} of the server's CPU")


if __name__ == "__main__":
    main()
