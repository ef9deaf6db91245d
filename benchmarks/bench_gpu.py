"""GPU: FlagEmbedding against vLLM + plugin on a real-size random bge-m3, fp16.

    python benchmarks/bench_gpu.py [--docs 2000] [--words 254]

Needs one CUDA GPU and the CUDA `vllm` package (pip install '.[cuda,test]').
The model is random but has bge-m3's size: hidden 1024, 24 layers, 16 heads,
vocab 250,002 (about 570M parameters). Takes about 10 minutes. Prints the
throughput ratio vLLM / FlagEmbedding (goal >= 5x). On a machine without a
GPU it stops at once with a message saying so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    MODELS_DIR,
    documents,
    interleaved,
    median,
    print_settings,
)

from bge_m3_sparse_plugin._config import engine_kwargs
from bge_m3_sparse_plugin.tiny_model import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(
    hidden_size=1024,
    num_layers=24,
    num_heads=16,
    intermediate_size=4096,
    max_position_embeddings=8194,
    vocab_size=250002,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--words", type=int, default=254)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        raise SystemExit(
            "bench_gpu.py needs a CUDA GPU and the CUDA vllm package; this machine has none "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False). "
            "Run benchmarks/bench_vs_flagembedding.py for the CPU comparison."
        )
    path = MODELS_DIR / "bge-m3-realsize"
    if not (path / "sparse_linear.pt").exists():
        build_tiny_model(path, SPEC)
    docs = documents(args.docs, args.words)
    print_settings(
        model=f"random bge-m3 size ({path})",
        docs=args.docs,
        tokens_per_doc=args.words + 3,
        dtype="float16",
        gpu=torch.cuda.get_device_name(0),
        rounds=args.rounds,
    )

    from FlagEmbedding import BGEM3FlagModel
    from vllm import LLM

    flag = BGEM3FlagModel(str(path), use_fp16=True, devices="cuda:0")
    # Both stay loaded (about 1 GB each for the weights), so the rounds can alternate.
    llm = LLM(
        **engine_kwargs(
            gpu=True,
            model=str(path),
            dtype="float16",
            gpu_memory_utilization=0.6,  # FlagEmbedding holds its copy beside it
            max_model_len=8192,
        )
    )
    request = {"data": {"input": docs, "return_dense": True}}

    def run_flag() -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        flag.encode(docs, return_dense=True, return_sparse=True, batch_size=128, max_length=1024)
        return time.perf_counter() - start

    def run_vllm() -> float:
        start = time.perf_counter()
        llm.encode(request, pooling_task="plugin", use_tqdm=False)
        return time.perf_counter() - start

    run_flag(), run_vllm()  # warm-up
    times = interleaved({"flagembedding": run_flag, "vllm": run_vllm}, args.rounds)
    t_flag, t_vllm = median(times["flagembedding"]), median(times["vllm"])
    print(f"flagembedding: median {t_flag:.2f} s  {args.docs / t_flag:.0f} docs/s")
    print(f"vllm + plugin: median {t_vllm:.2f} s  {args.docs / t_vllm:.0f} docs/s")
    print(f"throughput vllm / flagembedding: {t_flag / t_vllm:.2f}x (goal >= 5x)")


if __name__ == "__main__":
    main()
