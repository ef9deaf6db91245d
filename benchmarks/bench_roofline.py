"""Each path's useful FLOP/s as a share of this machine's matrix-multiply peak.

    python benchmarks/bench_roofline.py [--model mid|small|FOLDER] [--docs 600] [--rounds 3]
                                        [--dtype float32|bfloat16|float16|auto]
                                        [--skip-flag] [--skip-command] [--engine KEY=VALUE ...]

One corpus (--docs documents of log-normal length, as benchmarks/bench_index.py
builds it) is encoded, sparse and dense, by:
- plain `LLM.encode` with the plugin: the corpus tokenized and sent 512
  token-id lists a call, max_num_batched_tokens 16384 (unless --engine says);
- `bge-m3-sparse index IN OUT --model M --dense --dtype D`, as a user runs it
  (its job time, from its summary: engine ready to last shard recorded);
- FlagEmbedding's `BGEM3FlagModel.encode` (batch 32, sorted by length itself).
The command and plain alternate, round by round; FlagEmbedding runs once.

The peak is torch's matrix multiply on the model's own weight shapes (8,192
rows), measured before and after the paths, at the paths' precision: --dtype,
by default fp32 on every core of a CPU and fp16 on a GPU; --dtype auto is the
index command's own choice on this machine (bfloat16 on a CPU with bfloat16
instructions). The larger of the two is the roof. FlagEmbedding runs at fp32
on a CPU whatever --dtype says (its CPU path), so it runs only at fp32 there.
The FLOP count and its formula are printed (benchmarks/_flops.py).

--model takes a size that bge_m3_sparse_plugin.tiny_model builds (small, mid)
or a model folder (bge-m3 itself, on a GPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import SPECS, model_dir, print_settings, use_cpu_engine_env
from _flops import FORMULA, Shape, gemm_peak, useful_flops
from bench_index import corpus, run_command, run_flag, run_plain

from bge_m3_sparse_plugin._precision import choose_precision, cpu_flags

PEAK_ROWS = 8192


def parse_engine(pairs: list[str]) -> dict[str, object]:
    """--engine max_num_seqs=512 -> {"max_num_seqs": 512}."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = int(value) if value.isdigit() else value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid")
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default=None, help="float32 on a CPU, float16 on a GPU; auto")
    parser.add_argument("--skip-flag", action="store_true")
    parser.add_argument("--skip-command", action="store_true")
    parser.add_argument(
        "--engine",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="vllm.LLM settings for plain LLM.encode (max_num_batched_tokens=16384 unless given)",
    )
    parser.add_argument(
        "--command-args",
        default="",
        help="extra arguments for the index command, as one string (none: as a user runs it)",
    )
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoTokenizer

    gpu = torch.cuda.is_available()
    if not gpu:
        use_cpu_engine_env()
        torch.set_num_threads(os.cpu_count() or 1)
    device = "cuda" if gpu else "cpu"
    dtype = args.dtype or ("float16" if gpu else "float32")
    if dtype == "auto":
        chosen = choose_precision("auto", gpu, cpu_flags()).dtype
        dtype = "float16" if chosen == "auto" else chosen
    path = model_dir(args.model) if args.model in SPECS else Path(args.model)
    shape = Shape.of(AutoConfig.from_pretrained(path))
    docs = corpus(args.docs)
    lengths = [len(ids) for ids in AutoTokenizer.from_pretrained(path)(docs)["input_ids"]]
    flops = useful_flops(lengths, shape)
    engine = parse_engine(args.engine)
    print_settings(
        model=f"{path} (hidden {shape.hidden}, intermediate {shape.intermediate}, "
        f"{shape.layers} layers)",
        device=torch.cuda.get_device_name(0) if gpu else f"cpu, {torch.get_num_threads()} threads",
        dtype=dtype,
        docs=args.docs,
        tokens=f"{sum(lengths):,} (median {statistics.median(lengths):.0f}, max {max(lengths)})",
        plain_engine={"max_num_batched_tokens": 16384, **engine},
        command_args=args.command_args or "(none: as a user runs it)",
        rounds=args.rounds,
    )
    print(f"useful FLOPs: {flops / 1e12:.3f} TFLOP, {FORMULA}")

    peaks = [gemm_peak(shape, PEAK_ROWS, device, dtype)]
    print(f"GEMM peak before: {peaks[0] / 1e9:,.1f} GFLOP/s ({dtype}, {PEAK_ROWS} rows)")
    times: dict[str, list[float]] = {"plain LLM.encode": [], "bge-m3-sparse index (job)": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            if not args.skip_command:
                seconds, _, _ = run_command(
                    path,
                    docs,
                    Path(tmp),
                    True,
                    dtype=dtype,
                    settings=tuple(args.command_args.split()),
                )
                times["bge-m3-sparse index (job)"].append(seconds)
            times["plain LLM.encode"].append(
                run_plain(path, docs, True, gpu=gpu, dtype=dtype, **engine)
            )
    if not args.skip_flag and (gpu or dtype == "float32"):
        times["FlagEmbedding encode"] = [run_flag(path, docs, gpu=gpu)]
    peaks.append(gemm_peak(shape, PEAK_ROWS, device, dtype))
    print(f"GEMM peak after:  {peaks[1] / 1e9:,.1f} GFLOP/s")
    roof = max(peaks)

    print(
        f"{'path':<28} {'by round (s)':<26} {'best s':>7} {'docs/s':>7} {'GFLOP/s':>8} {'of peak':>8}"
    )
    for name, values in times.items():
        if not values:
            continue
        best = min(values)
        rounds = ", ".join(f"{v:.1f}" for v in values)
        print(
            f"{name:<28} {rounds:<26} {best:7.1f} {args.docs / best:7.1f} "
            f"{flops / best / 1e9:8.1f} {flops / best / roof:8.3f}"
        )
    plain, command = times["plain LLM.encode"], times["bge-m3-sparse index (job)"]
    if command:
        ratios = [p / c for p, c in zip(plain, command)]
        print(
            "index command / plain, by round: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + f" (mean {statistics.mean(ratios):.3f})"
        )
    if "FlagEmbedding encode" in times:
        print(f"plain / FlagEmbedding: {times['FlagEmbedding encode'][0] / min(plain):.2f}x")


if __name__ == "__main__":
    main()
