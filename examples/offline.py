"""Sparse embeddings offline: vLLM's LLM.encode with the plugin.

python examples/offline.py                    # the built-in small random model
python examples/offline.py --model BAAI/bge-m3 --dtype float16 --gpu-memory-utilization 0.9
"""

from __future__ import annotations

import argparse
import json

DEFAULT_MODEL_DIR = "models/bge-m3-tiny"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help=f"model path or name (default: build {DEFAULT_MODEL_DIR})"
    )
    parser.add_argument("--dtype", default="float32")
    # The CPU backend reserves this share of the NUMA node's memory for the KV cache.
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.2)
    args = parser.parse_args()

    model = args.model
    if model is None:
        from bge_m3_sparse_plugin.tiny_model import build_tiny_model

        model = str(build_tiny_model(DEFAULT_MODEL_DIR))

    from vllm import LLM

    llm = LLM(
        model=model,
        runner="pooling",
        hf_overrides={"architectures": ["BgeM3OnePassModel"]},
        io_processor_plugin="bge_m3_sparse_plugin",
        dtype=args.dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    try:
        outputs = llm.encode(
            {"data": {"input": ["I love China", "hi, bge-m3"], "return_tokens": True}},
            pooling_task="plugin",
        )
        print(json.dumps(outputs[0].outputs.model_dump(), indent=2))
    finally:
        # Stop the engine here, not in the interpreter's teardown, where vLLM's
        # shutdown can race its other threads and abort the process (SIGABRT).
        llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":  # vLLM starts its engine in a spawned process
    main()
