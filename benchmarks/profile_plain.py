"""Where one plain LLM.encode run's time goes: GEMMs, attention, the rest.

    python benchmarks/profile_plain.py [--model mid] [--docs 600] [--out /tmp/profile]

Runs bench_roofline.py's plain path (the corpus tokenized, sent 512 token-id
lists a call, max_num_batched_tokens 16384, every core) once with torch's
profiler in vLLM's model worker (vLLM's own --profiler-config, CPU activity,
no stacks) and Python's cProfile in the front-end process, then splits:

- the worker's wall time, from the profiler's start to its stop, into each
  class of torch op by self time (GEMM, attention, elementwise, other), the
  model runner's own Python around them (input preparation, the pooler's
  bookkeeping: step time less the ops), and the worker waiting for work;
- the front end (this process): the plugin's pre_process and post_process,
  vLLM's input and output processing, and the time it waits on the engine.

The chrome trace and vLLM's op table stay in --out.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import gzip
import json
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import SPECS, llm_kwargs, model_dir, print_settings, use_cpu_engine_env
from bench_index import corpus

# An op's class, by the first pattern its name contains (lower case).
CLASSES = [
    ("attention", ("attention", "attn", "sdpa", "softmax", "bmm", "baddbmm")),
    ("GEMM", ("addmm", "aten::mm", "matmul", "linear", "onednn", "mkldnn", "gemm", "mm_")),
    (
        "elementwise",
        (
            "layer_norm",
            "gelu",
            "add",
            "mul",
            "div",
            "sub",
            "tanh",
            "relu",
            "erf",
            "sqrt",
            "pow",
        ),
    ),
]


def op_class(name: str) -> str:
    lower = name.lower()
    for cls, patterns in CLASSES:
        if any(p in lower for p in patterns):
            return cls
    return "other ops (copies, indexing, embedding look-up, ...)"


def self_times(events: list[dict]) -> tuple[dict[str, float], dict[str, float], float, float]:
    """From one thread's complete events: self time (µs) of each op name, of
    each class, the time inside ops (top level), and the span of the events."""
    events = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    by_name: dict[str, float] = defaultdict(float)
    stack: list[list] = []  # [end, name, self]
    top = 0.0

    def close(until: float) -> None:
        while stack and stack[-1][0] <= until:
            _, name, own = stack.pop()
            by_name[name] += own

    for e in events:
        close(e["ts"])
        if stack:
            stack[-1][2] -= e["dur"]
        else:
            top += e["dur"]
        stack.append([e["ts"] + e["dur"], e["name"], e["dur"]])
    close(float("inf"))
    by_class: dict[str, float] = defaultdict(float)
    for name, own in by_name.items():
        by_class[op_class(name)] += own
    span = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    return by_name, by_class, top, span


def read_trace(folder: Path) -> dict:
    paths = sorted(glob.glob(str(folder / "*.pt.trace.json*")))
    if not paths:
        raise SystemExit(f"no trace in {folder}: did vLLM's profiler run?")
    path = paths[-1]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid")
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--out", default="/tmp/bge-m3-profile")
    args = parser.parse_args()
    use_cpu_engine_env()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*"):
        old.unlink()
    path = model_dir(args.model) if args.model in SPECS else Path(args.model)
    docs = corpus(args.docs)
    print_settings(model=str(path), docs=args.docs, profile=str(out))

    from vllm import LLM

    llm = LLM(
        **llm_kwargs(
            str(path),
            max_num_batched_tokens=16384,
            profiler_config={
                "profiler": "torch",
                "torch_profiler_dir": str(out),
                "torch_profiler_with_stack": False,
                "torch_profiler_use_gzip": False,
                "torch_profiler_activities": ["CPU"],
            },
        )
    )
    request = {"input": [], "sparse_format": "indices_values", "return_dense": True}

    def encode(ids: list[list[int]]) -> None:
        for i in range(0, len(ids), 512):
            data = {**request, "input": ids[i : i + 512]}
            llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)

    tokenizer = llm.get_tokenizer()
    encode(tokenizer(docs[:64])["input_ids"])  # warm-up, not profiled
    llm.start_profile()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    encode(tokenizer(docs)["input_ids"])
    profiler.disable()
    wall = time.perf_counter() - start
    llm.stop_profile()
    llm.llm_engine.engine_core.shutdown()

    trace = read_trace(out)
    ops_by_thread: dict[tuple, list[dict]] = defaultdict(list)
    steps_by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        if e.get("cat") == "cpu_op":
            ops_by_thread[key].append(e)
        elif e.get("cat") == "user_annotation":
            steps_by_thread[key].append(e)
    thread = max(ops_by_thread, key=lambda k: sum(e["dur"] for e in ops_by_thread[k]))
    by_name, by_class, in_ops, _ = self_times(ops_by_thread[thread])
    annotations = steps_by_thread.get(thread, [])
    by_annotation: dict[str, float] = defaultdict(float)
    for e in annotations:
        by_annotation[e["name"]] += e["dur"]
    # vLLM's CPU runner marks each model step "execute_context_<seqs>(<tokens>)_...".
    steps = [e for e in annotations if e["name"].startswith("execute_")]
    print(f"wall (front end, the whole encode): {wall:.2f} s; model steps: {len(steps)}")

    stats = pstats.Stats(profiler)
    cum: dict[str, float] = defaultdict(float)
    for (file, _, func), (_, _, _, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "bge_m3_sparse_plugin" in file and func in ("pre_process", "post_process"):
            cum[f"plugin {func}"] += ct
        if func == "step" and file.endswith("llm_engine.py"):
            cum["vLLM LLMEngine.step (send, wait, receive, output processing)"] += ct
        if func == "get_output" and "core_client" in file:
            cum["waiting on the engine (core_client.get_output)"] += ct
        if func == "_add_request" and file.endswith("entrypoints/llm.py"):
            cum["vLLM add_request (input processing)"] += ct

    us = 1e-6
    rows = [(cls, t * us) for cls, t in sorted(by_class.items(), key=lambda kv: -kv[1])]
    worker_ops = in_ops * us
    print("\nthe model worker (torch profiler, self time of each op, by class):")
    print(f"  {'part':<58} {'s':>7} {'of wall':>8}")
    for cls, seconds in rows:
        print(f"  {cls:<58} {seconds:7.2f} {seconds / wall:8.3f}")
    print(f"  {'all ops':<58} {worker_ops:7.2f} {worker_ops / wall:8.3f}")
    in_steps = sum(e["dur"] for e in steps) * us
    print(f"  {'in model steps (annotated spans)':<58} {in_steps:7.2f} {in_steps / wall:8.3f}")
    idle = wall - worker_ops
    print(
        f"  {'not in a torch op (Python, scheduling, waiting)':<58} {idle:7.2f} {idle / wall:8.3f}"
    )
    print("\nthe front end (this process, cProfile, cumulative):")
    for name, seconds in sorted(cum.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<58} {seconds:7.2f} {seconds / wall:8.3f}")
    print("\nthe 15 ops with the most self time:")
    for name, t in sorted(by_name.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {name[:58]:<58} {t * us:7.2f}  {op_class(name)}")


if __name__ == "__main__":
    main()
