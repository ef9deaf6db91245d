"""Each process's memory over a long index run: does vLLM's CPU worker plateau?

    python benchmarks/bench_memory.py [--docs 200000] [--model small] [--words 24]
                                      [--png benchmarks/memory_200k.png]

Runs `bge-m3-sparse index` (sparse and dense, 10,000 rows a shard) on --docs
short documents and samples, every 2 s, the RSS of the command's process and
of each of its children (vLLM's engine core and its model worker), with the
rows recorded so far. Prints a table at each tenth of the run and writes the
plot (needs matplotlib: pip install matplotlib) and the samples as CSV beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from _common import CPU_ENGINE_ENV, model_dir, print_settings

from bge_m3_sparse_plugin.index._output import MANIFEST
from bge_m3_sparse_plugin.tiny_model import WORDS


def label(proc: psutil.Process, root: int) -> str:
    if proc.pid == root:
        return "command"
    try:
        name = proc.name()
    except psutil.Error:
        return str(proc.pid)
    if "EngineCore" in name:
        return "engine core"
    if "Worker" in name or "Worker" in " ".join(proc.cmdline()[:3]):
        return "model worker"
    return name


def rows_done(out: Path) -> int:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return 0
    return sum(s.get("rows", 0) for s in manifest.get("shards", {}).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--model", default="small", choices=["small", "mid"])
    parser.add_argument("--words", type=int, default=24)
    parser.add_argument("--rows-per-shard", type=int, default=10_000)
    parser.add_argument("--png", default="benchmarks/memory_200k.png")
    args = parser.parse_args()
    path = model_dir(args.model)
    rng = random.Random(0)
    print_settings(model=str(path), docs=args.docs, words=f"{args.words // 2} to {args.words}")
    samples: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "docs.jsonl", Path(tmp) / "out"
        with open(inp, "w") as f:
            for i in range(args.docs):
                n = rng.randint(args.words // 2, args.words)
                text = " ".join(rng.choice(WORDS) for _ in range(n)) + "."
                f.write(json.dumps({"id": str(i), "text": text}) + "\n")
        cmd = [sys.executable, "-m", "bge_m3_sparse_plugin", "index", str(inp), str(out)]
        cmd += ["--model", str(path), "--dense", "--dtype", "float32", "--no-progress"]
        cmd += ["--rows-per-shard", str(args.rows_per_shard)]
        env = {**os.environ, **CPU_ENGINE_ENV, "VLLM_LOGGING_LEVEL": "ERROR"}
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            sample: dict = {"s": round(time.monotonic() - start, 1), "rows": rows_done(out)}
            try:
                for p in [root, *root.children(recursive=True)]:
                    key = label(p, proc.pid) + " MB"
                    sample[key] = sample.get(key, 0) + round(p.memory_info().rss / 2**20)
            except psutil.Error:
                pass
            samples.append(sample)
            time.sleep(2)
        stdout = proc.stdout.read() if proc.stdout else ""
        assert proc.returncode == 0, stdout
    print(stdout.strip())
    print("processes seen:", sorted({k for s in samples for k in s} - {"s", "rows"}))
    keys = ["command MB", "engine core MB", "model worker MB"]
    running = [s for s in samples if all(k in s for k in keys) and s["rows"] > 0]
    print(f"{'rows recorded':>13} {'s':>7} " + " ".join(f"{k:>16}" for k in keys))
    shown = -1
    for s in running:
        tenth = s["rows"] * 10 // args.docs
        if tenth > shown:
            shown = tenth
            print(f"{s['rows']:>13,} {s['s']:7.0f} " + " ".join(f"{s[k]:>16,}" for k in keys))
    last = running[-1]
    print(f"{last['rows']:>13,} {last['s']:7.0f} " + " ".join(f"{last[k]:>16,}" for k in keys))
    png = Path(args.png)
    with open(png.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["s", "rows", *keys], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(s for s in samples if all(k in s for k in keys))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"no plot: matplotlib is not installed (the samples are in {png.with_suffix('.csv')})"
        )
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key in keys:
        ax.plot([s["s"] for s in running], [s[key] for s in running], label=key[:-3])
    ax.set_xlabel(
        f"seconds ({running[0]['s']:.0f} s: first shard recorded; {args.rows_per_shard:,} rows a shard)"
    )
    ax.set_ylabel("RSS, MB")
    ax.set_title(
        f"bge-m3-sparse index, {args.docs:,} documents, {args.model} model: RSS per process"
    )
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"plot: {png}; samples: {png.with_suffix('.csv')}")


if __name__ == "__main__":
    main()
