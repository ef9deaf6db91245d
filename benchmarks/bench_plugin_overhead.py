"""Plugin overhead: the plugin path against raw LLM.encode on the same engine.

    python benchmarks/bench_plugin_overhead.py [--docs 400] [--words 98] [--rounds 5]
        [--model small|mid] [--sparse-format token_weights|lexical_weights|indices_values]

One engine on the small model. Interleaved rounds of
- plugin: llm.encode({"data": {"input": docs, "return_tokens": True}}, pooling_task="plugin")
- raw:    llm.encode(docs, pooling_task="embed&token_classify")
prints the throughput ratio plugin/raw (goal >= 0.98) and how much of the
plugin's time its post-processing takes (goal < 1 %).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    HF_OVERRIDES,
    documents,
    interleaved,
    median,
    model_dir,
    print_settings,
    use_cpu_engine_env,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--words", type=int, default=98, help="words per doc; one token each")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="small", choices=["small", "mid"])
    parser.add_argument(
        "--sparse-format",
        default="token_weights",
        choices=["token_weights", "lexical_weights", "indices_values"],
        help="the request's sparse_format (return_tokens is on for token_weights)",
    )
    args = parser.parse_args()

    use_cpu_engine_env()
    path = model_dir(args.model)
    docs = documents(args.docs, args.words)

    from transformers import AutoTokenizer
    from vllm import LLM

    tokens = sum(len(ids) for ids in AutoTokenizer.from_pretrained(path)(docs)["input_ids"])
    print_settings(
        model=f"{args.model} ({path})",
        docs=args.docs,
        tokens_per_doc=tokens / args.docs,
        dtype="float32",
        rounds=args.rounds,
        sparse_format=args.sparse_format,
    )
    llm = LLM(
        model=str(path),
        runner="pooling",
        hf_overrides=HF_OVERRIDES,
        io_processor_plugin="bge_m3_sparse_plugin",
        dtype="float32",
        gpu_memory_utilization=0.2,
        max_num_batched_tokens=16384,
        max_num_seqs=256,
    )
    data = {"input": docs, "sparse_format": args.sparse_format}
    if args.sparse_format == "token_weights":
        data["return_tokens"] = True
    request = {"data": data}

    def plugin():
        return llm.encode(request, pooling_task="plugin", use_tqdm=False)

    def raw():
        return llm.encode(docs, pooling_task="embed&token_classify", use_tqdm=False)

    plugin(), raw()  # warm-up: caches, token strings
    times = interleaved({"plugin": plugin, "raw": raw}, args.rounds)
    t_plugin, t_raw = median(times["plugin"]), median(times["raw"])

    # The post-processing alone, on the raw path's outputs.
    processor = llm.pooling_io_processors["plugin"].io_processor
    outputs = raw()
    post = []
    for _ in range(args.rounds):
        processor.pre_process(processor.parse_data(request["data"]))
        start = time.perf_counter()
        processor.post_process(outputs)
        post.append(time.perf_counter() - start)
    t_post = median(post)

    print(f"plugin: median {t_plugin:.3f} s  ({args.docs / t_plugin:.0f} docs/s)")
    print(f"raw:    median {t_raw:.3f} s  ({args.docs / t_raw:.0f} docs/s)")
    print(f"throughput ratio plugin/raw: {t_raw / t_plugin:.3f} (goal >= 0.98)")
    print(
        f"post-processing: median {t_post * 1e3:.1f} ms = {100 * t_post / t_plugin:.2f} % "
        f"of the plugin path (goal < 1 %)"
    )
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
