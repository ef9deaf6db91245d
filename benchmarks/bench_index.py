"""The index command against plain LLM.encode and FlagEmbedding, on one corpus.

    python benchmarks/bench_index.py [--docs 2000] [--model mid|small] [--rounds 2] [--skip-flag] [--skip-ray]
    python benchmarks/bench_index.py --memory [--model small]   # peak memory at 2,000 and 20,000 docs

A corpus of --docs documents of log-normal length (about 30 to 1,000 tokens,
median about 115; one token per word) is indexed three ways, each on every
core of the machine:
- `bge-m3-sparse index` (a subprocess, as a user runs it), sparse and dense,
  on one machine and with --ray (a local Ray, one replica);
- plain `LLM.encode` with the plugin, the same engine settings, the corpus in
  one call (what the command costs beyond the engine);
- FlagEmbedding's `BGEM3FlagModel.encode`, batch 32 sorted by length as it
  does itself, sparse and dense.
Prints documents/s and tokens/s of each and the ratios; with --memory, the
command's peak RSS (its process and the engine's) at two corpus sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from _common import CPU_ENGINE_ENV, llm_kwargs, model_dir, print_settings
from _procs import ProcessWatch

from bge_m3_sparse_plugin._config import engine_kwargs
from bge_m3_sparse_plugin.tiny_model import WORDS


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        words = int(min(998, max(28, math.exp(rng.gauss(math.log(113), 0.8)))))
        docs.append(" ".join(rng.choice(WORDS) for _ in range(words)) + ".")
    return docs


def write_jsonl(docs: list[str], path: Path) -> None:
    with open(path, "w") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")


def peak_rss_of(proc: subprocess.Popen) -> tuple[threading.Thread, list[float]]:
    peak = [0.0]

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                procs = [root, *root.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in procs) / 2**20)
            except psutil.Error:
                pass
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return thread, peak


# The command's settings in this benchmark (bench_roofline.py runs it with none).
BENCH_SETTINGS = (
    "--rows-per-shard",
    "1000",
    "--no-progress",
    "--max-num-batched-tokens",
    "16384",
)


def run_command(
    model: Path,
    docs: list[str],
    work: Path,
    dense: bool,
    *extra: str,
    env: dict[str, str] | None = None,
    dtype: str = "float32",
    settings: tuple[str, ...] = BENCH_SETTINGS,
    watches: list[ProcessWatch] | None = None,
) -> tuple[float, float, float]:
    """The index command as a user runs it, with ``settings`` (this benchmark's:
    the engine's as plain LLM.encode's, no progress bar): its job's seconds (from its summary:
    after the (first) engine was ready), the whole process's wall seconds, and its peak RSS in MB (the
    process and all its children: engine, or Ray and its replicas). With ``watches``,
    a :class:`~_procs.ProcessWatch` of the run is added to it."""
    inp, out = work / "corpus.jsonl", work / f"out-{len(docs)}-{time.time_ns()}"
    write_jsonl(docs, inp)
    cmd = [
        sys.executable,
        "-m",
        "bge_m3_sparse_plugin",
        "index",
        str(inp),
        str(out),
        "--model",
        str(model),
        "--dtype",
        dtype,
        *settings,
        *(["--dense"] if dense else []),
        *extra,
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", **(env or {})},
    )
    thread, peak = peak_rss_of(proc)
    if watches is not None:
        watches.append(ProcessWatch(proc.pid, out))
    stdout, _ = proc.communicate()
    wall = time.perf_counter() - started
    thread.join()
    assert proc.returncode == 0, stdout
    # "indexed N documents (T tokens) in S s: ..."
    seconds = float(stdout.split(" in ", 1)[1].split(" s", 1)[0])
    return seconds, wall, peak[0]


def run_ray(
    model: Path, docs: list[str], work: Path, dense: bool, **kwargs: Any
) -> tuple[float, float, float]:
    """The command with --ray: a local Ray on this machine, one replica on every core.
    Ray's session and auth token go to a temporary folder, not /tmp/ray and ~/.ray;
    vLLM's compile cache stays the one-machine runs' own."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    home = work / "home"
    home.mkdir(exist_ok=True)
    try:
        return run_command(
            model,
            docs,
            work,
            dense,
            "--ray",
            env={
                "RAY_TMPDIR": str(ray_tmp),
                "HOME": str(home),
                # vLLM's compile cache where the one-machine runs keep theirs, so that
                # the replica does not compile again because HOME moved.
                "VLLM_CACHE_ROOT": os.environ.get(
                    "VLLM_CACHE_ROOT", str(Path("~/.cache/vllm").expanduser())
                ),
            },
            **kwargs,
        )
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)


def run_plain(
    model: Path, docs: list[str], dense: bool, gpu: bool = False, **settings: object
) -> float:
    """Plain ``LLM.encode`` with the plugin: the corpus tokenized, then sent 512
    token-id lists a call; ``settings`` are vllm.LLM's (the default:
    ``max_num_batched_tokens`` 16384, float32 on a CPU, float16 on a GPU)."""
    from vllm import LLM

    settings = {"max_num_batched_tokens": 16384, **settings}
    if gpu:
        llm = LLM(**engine_kwargs(True, model=str(model), **{"dtype": "float16", **settings}))
    else:
        llm = LLM(**llm_kwargs(str(model), **settings))
    tokenizer = llm.get_tokenizer()
    start = time.perf_counter()
    ids = tokenizer(docs)["input_ids"]
    for i in range(0, len(ids), 512):
        llm.encode(
            {
                "data": {
                    "input": ids[i : i + 512],
                    "sparse_format": "indices_values",
                    "return_dense": dense,
                }
            },
            pooling_task="plugin",
            use_tqdm=False,
        )
    took = time.perf_counter() - start
    llm.llm_engine.engine_core.shutdown()
    return took


def run_flag(model: Path, docs: list[str], gpu: bool = False) -> float:
    """FlagEmbedding's encode, sparse and dense: batch 32 in float32 on the CPU's
    cores, batch 128 in float16 on a GPU."""
    import torch
    from FlagEmbedding import BGEM3FlagModel

    if gpu:
        flag = BGEM3FlagModel(str(model), use_fp16=True, devices="cuda:0")
    else:
        torch.set_num_threads(os.cpu_count() or 1)
        flag = BGEM3FlagModel(str(model), use_fp16=False, devices="cpu")
    start = time.perf_counter()
    flag.encode(
        docs,
        batch_size=128 if gpu else 32,
        max_length=1024,
        return_dense=True,
        return_sparse=True,
    )
    if gpu:
        torch.cuda.synchronize()
    took = time.perf_counter() - start
    del flag
    if gpu:
        torch.cuda.empty_cache()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--model", default="mid", choices=["small", "mid"])
    parser.add_argument("--skip-flag", action="store_true")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    for key, value in CPU_ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    path = model_dir(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.memory:
            print_settings(model=f"{args.model} ({path})")
            for n in (2000, 20000):
                seconds, _, peak = run_command(path, corpus(n), work, dense=False)
                print(
                    f"  {n:>6} docs: {n / seconds:7.1f} docs/s, peak RSS (command + engine) {peak:,.0f} MB"
                )
            return
        docs = corpus(args.docs)
        from transformers import AutoTokenizer

        tokens = sum(map(len, AutoTokenizer.from_pretrained(path)(docs)["input_ids"]))
        lengths = sorted(map(len, AutoTokenizer.from_pretrained(path)(docs)["input_ids"]))
        print_settings(
            model=f"{args.model} ({path})",
            docs=args.docs,
            tokens=tokens,
            tokens_per_doc=f"min {lengths[0]}, median {lengths[len(lengths) // 2]}, max {lengths[-1]}",
        )
        # Alternating rounds: this machine drifts by 10-15 % over minutes, so the
        # command and plain LLM.encode are compared round by round.
        job, wall, ray_job, ray_wall, plain, peak, ray_peak = [], [], [], [], [], 0.0, 0.0
        for _ in range(args.rounds):
            seconds, whole, rss = run_command(path, docs, work, dense=True)
            job.append(seconds)
            wall.append(whole)
            peak = max(peak, rss)
            plain.append(run_plain(path, docs, dense=True))
            if not args.skip_ray:
                seconds, whole, rss = run_ray(path, docs, work, dense=True)
                ray_job.append(seconds)
                ray_wall.append(whole)
                ray_peak = max(ray_peak, rss)
        flag = None if args.skip_flag else run_flag(path, docs)

        def line(name: str, seconds: float) -> None:
            print(
                f"  {name:<34} {seconds:8.1f} s  {args.docs / seconds:7.1f} docs/s  "
                f"{tokens / seconds:9.0f} tokens/s"
            )

        for r in range(args.rounds):
            line(f"round {r + 1}: index command (job)", job[r])
            line(f"round {r + 1}: plain LLM.encode", plain[r])
            line(f"round {r + 1}: index command (whole run)", wall[r])
            if ray_wall:
                line(f"round {r + 1}: index --ray (job)", ray_job[r])
                line(f"round {r + 1}: index --ray (whole run)", ray_wall[r])
        if flag is not None:
            line("FlagEmbedding encode", flag)
        print(f"  index command peak RSS (command + engine): {peak:,.0f} MB")
        if ray_wall:
            print(f"  index --ray peak RSS (command, Ray, replica): {ray_peak:,.0f} MB")
        ratios = [p / j for p, j in zip(plain, job)]
        print(
            "  index command / plain LLM.encode, by round: "
            + ", ".join(f"{x:.3f}" for x in ratios)
            + " (goal >= 0.95)"
        )
        if ray_wall:
            print(
                "  index --ray / index, jobs (after the engine started), by round: "
                + ", ".join(f"{j / rj:.3f}" for j, rj in zip(job, ray_job))
                + " (goal >= 0.85)"
            )
            print(
                "  index --ray / index, whole runs (start-up included), by round: "
                + ", ".join(f"{w / rw:.3f}" for w, rw in zip(wall, ray_wall))
            )
        if flag is not None:
            best = min(job)
            print(
                f"  index command / FlagEmbedding: {flag / best:.2f}x "
                f"(best round; {flag / max(job):.2f}x worst) (goal >= 2.5x)"
            )


if __name__ == "__main__":
    main()
