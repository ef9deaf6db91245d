"""Plugin overhead: the plugin path against raw LLM.encode on the same engine.

    python benchmarks/bench_plugin_overhead.py [--docs 400] [--words 98] [--rounds 5]
        [--model small|mid] [--sparse-format token_weights|lexical_weights|indices_values]

One engine on the small model. Interleaved rounds of
- plugin: llm.encode({"data": {"input": docs, "return_tokens": True}}, pooling_task="plugin")
- plugin, heap frozen: the same after vLLM's freeze_gc_heap() (what its engine core
          does in its own process; an experiment, which the plugin does not ship)
- raw:    llm.encode(docs, pooling_task="embed&token_classify")
prints the throughput ratios plugin/raw (goal >= 0.98), the time each path spent
in garbage-collector pauses (gc.callbacks: steadier on a shared machine than
wall time), and how much of the plugin's time its post-processing takes (goal < 1 %).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    documents,
    interleaved,
    llm_kwargs,
    median,
    model_dir,
    print_settings,
    use_cpu_engine_env,
)


class GcPauses:
    """Seconds spent in garbage collections, and their count, per label."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.seconds: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if self.label is None:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            pause = time.perf_counter() - self._started
            self.seconds[self.label] = self.seconds.get(self.label, 0.0) + pause
            self.count[self.label] = self.count.get(self.label, 0) + 1


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
        **llm_kwargs(str(path)),
        max_num_batched_tokens=16384,
        max_num_seqs=256,
    )
    data = {"input": docs, "sparse_format": args.sparse_format}
    if args.sparse_format == "token_weights":
        data["return_tokens"] = True
    request = {"data": data}

    from vllm.utils.gc_utils import freeze_gc_heap

    def plugin():
        return llm.encode(request, pooling_task="plugin", use_tqdm=False)

    def raw():
        return llm.encode(docs, pooling_task="embed&token_classify", use_tqdm=False)

    plugin(), raw()  # warm-up: caches, token strings
    runs = {"plugin": plugin, "plugin, heap frozen": plugin, "raw": raw}
    # Untimed: the heap as vLLM leaves the offline process, or frozen.
    pauses = GcPauses()

    def counted(name, state):
        def prepare():
            pauses.label = None
            state()
            pauses.label = name

        return prepare

    before = {
        "plugin": counted("plugin", gc.unfreeze),
        "plugin, heap frozen": counted("plugin, heap frozen", freeze_gc_heap),
        "raw": counted("raw", gc.unfreeze),
    }
    times = interleaved(runs, args.rounds, before)
    pauses.label = None
    t_plugin, t_frozen, t_raw = (median(times[name]) for name in runs)

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

    for name, t in zip(runs, (t_plugin, t_frozen, t_raw)):
        print(f"{name + ':':<23} median {t:.3f} s  ({args.docs / t:.0f} docs/s)")
    print(f"throughput ratio plugin/raw: {t_raw / t_plugin:.3f} (goal >= 0.98)")
    print(f"  with the heap frozen:      {t_raw / t_frozen:.3f}")
    for name in runs:
        print(
            f"gc pauses, {name + ':':<23} {1e3 * pauses.seconds.get(name, 0) / args.rounds:6.1f} ms "
            f"per call ({pauses.count.get(name, 0) / args.rounds:.0f} collections)"
        )
    print(
        f"post-processing: median {t_post * 1e3:.1f} ms = {100 * t_post / t_plugin:.2f} % "
        f"of the plugin path (goal < 1 %)"
    )
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
