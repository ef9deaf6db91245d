"""Each process's memory over a long index run: does vLLM's CPU worker plateau?

    python benchmarks/bench_memory.py [--docs 200000] [--model small] [--words 24]
                                      [--png benchmarks/memory_200k.png]
                                      [--compare ONEDNN_PRIMITIVE_CACHE_CAPACITY=0]

Runs `bge-m3-sparse index` (sparse and dense, 10,000 rows a shard) on --docs
short documents and samples, every 2 s, the RSS of the command's process and
of each process started since (vLLM's engine core and its model worker among
them; _procs.ProcessWatch), with the rows recorded so far. Prints a table at each tenth of the run and writes the
plot (needs matplotlib: pip install matplotlib) and the samples as CSV beside it.

--compare VAR=VALUE runs the same command a second time, after the first,
with that environment variable set, and draws its worker beside the first's.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import CPU_ENGINE_ENV, model_dir, print_settings
from _procs import ProcessWatch

from bge_m3_sparse_plugin.tiny_model import WORDS

KEYS = ["command MB", "engine core MB", "model worker MB"]


def run(cmd: list[str], out: Path, extra_env: dict[str, str]) -> list[dict]:
    """The command's samples, every 2 s: seconds, rows recorded, MB by process."""
    env = {**os.environ, **CPU_ENGINE_ENV, "VLLM_LOGGING_LEVEL": "ERROR", **extra_env}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    watch = ProcessWatch(proc.pid, out, every=2.0)
    stdout, _ = proc.communicate()
    watch.join()
    assert proc.returncode == 0, stdout
    print(stdout.strip())
    samples = watch.rss_by_role()
    print("processes seen:", sorted({k for s in samples for k in s} - {"s", "rows"}))
    return [s for s in samples if all(k in s for k in KEYS) and s["rows"] > 0]


def table(running: list[dict], docs: int) -> None:
    """The samples at each tenth of the rows, and the last."""
    print(f"{'rows recorded':>13} {'s':>7} " + " ".join(f"{k:>16}" for k in KEYS))
    shown = -1
    for s in running:
        tenth = s["rows"] * 10 // docs
        if tenth > shown:
            shown = tenth
            print(f"{s['rows']:>13,} {s['s']:7.0f} " + " ".join(f"{s[k]:>16,}" for k in KEYS))
    last = running[-1]
    print(f"{last['rows']:>13,} {last['s']:7.0f} " + " ".join(f"{last[k]:>16,}" for k in KEYS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--model", default="small", choices=["small", "mid"])
    parser.add_argument("--words", type=int, default=24)
    parser.add_argument("--rows-per-shard", type=int, default=10_000)
    parser.add_argument("--png", default="benchmarks/memory_200k.png")
    parser.add_argument("--compare", metavar="VAR=VALUE", help="a second run with this set")
    args = parser.parse_args()
    path = model_dir(args.model)
    rng = random.Random(0)
    print_settings(model=str(path), docs=args.docs, words=f"{args.words // 2} to {args.words}")
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "docs.jsonl"
        with open(inp, "w") as f:
            for i in range(args.docs):
                n = rng.randint(args.words // 2, args.words)
                text = " ".join(rng.choice(WORDS) for _ in range(n)) + "."
                f.write(json.dumps({"id": str(i), "text": text}) + "\n")
        variants = {"as users run it": {}}
        if args.compare:
            name, _, value = args.compare.partition("=")
            variants[args.compare] = {name: value}
        for label, extra_env in variants.items():
            out = Path(tmp) / f"out-{len(runs)}"
            cmd = [sys.executable, "-m", "bge_m3_sparse_plugin", "index", str(inp), str(out)]
            cmd += ["--model", str(path), "--dense", "--dtype", "float32", "--no-progress"]
            cmd += ["--rows-per-shard", str(args.rows_per_shard)]
            print(f"\n== {label}")
            runs[label] = run(cmd, out, extra_env)
            table(runs[label], args.docs)
    png = Path(args.png)
    with open(png.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["run", "s", "rows", *KEYS])
        writer.writeheader()
        for label, running in runs.items():
            writer.writerows(
                {"run": label, **{k: s[k] for k in ["s", "rows", *KEYS]}} for s in running
            )
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
    for n, (label, running) in enumerate(runs.items()):
        for key in KEYS if n == 0 else ["model worker MB"]:
            ax.plot(
                [s["s"] - running[0]["s"] for s in running],
                [s[key] for s in running],
                label=f"{key[:-3]} ({label})",
                linestyle="-" if n == 0 else "--",
            )
    ax.set_xlabel(f"seconds after the first shard recorded ({args.rows_per_shard:,} rows a shard)")
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
