"""Precision: how far each dtype is from FlagEmbedding at float32, and how fast it runs.

    python benchmarks/bench_precision.py drift [--sizes small,mid,deep] [--texts 48]
    python benchmarks/bench_precision.py speed [--model mid] [--docs 256] [--rounds 3] [--index-rounds 1]

drift: for each model, the same texts through FlagEmbedding at float32 (the
reference), float16 and bfloat16 (its own use_fp16 / use_bf16), the plugin
offline (LLM.encode) at float32, float16 and bfloat16, and the ONNX Runtime
peer (benchmarks/_onnx_peer.py) at int8 and float32, and with --w8a8 the
plugin on the model's int8 W8A8 checkpoint (benchmarks/make_w8a8.py, in
MODELS_DIR/bge-m3-SIZE-w8a8) at bfloat16; each row is
tests/support/drift.py's measures against the reference, the plugin's rows
with their ratio to FlagEmbedding's median at the same precision (the
criterion of tests/support/parity.py: at most 1.25).

speed: on one model, the same documents (log-normal lengths, as
bench_index.py), sparse and all three outputs, by vLLM + plugin at float32,
bfloat16 and float16 (one engine each, in a worker process, started before
any timing; rounds alternate) and by the ONNX Runtime peer at int8 and
float32 on as many threads as vLLM has cores; then the index command at each
dtype and with none (its auto: this machine's choice); with --w8a8, vLLM +
plugin on the W8A8 checkpoint too. Prints documents/s and
each one's ratio to vLLM + plugin at float32, and this CPU's features.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import (
    CPU_ENGINE_ENV,
    MODELS_DIR,
    SPECS,
    model_dir,
    print_settings,
    use_cpu_engine_env,
)
from bench_index import corpus, run_command

from bge_m3_sparse_plugin._config import MAX_COLBERT_VALUES_ENV, engine_kwargs
from bge_m3_sparse_plugin._precision import CPU_BF16_FLAGS, choose_precision, cpu_flags

DTYPES = ("float32", "bfloat16", "float16")
HALF = ("float16", "bfloat16")
TASKS = {
    "sparse": {},
    "all three": {"return_dense": True, "return_colbert_vecs": True, "encoding_format": "base64"},
}
SHOWN_FLAGS = ("avx2", "avx512f", *CPU_BF16_FLAGS, "avx512_fp16", "amx_fp16", "amx_int8")


def cpu_line() -> str:
    flags = cpu_flags()
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    have = [f for f in SHOWN_FLAGS if f in flags]
    return f"{model}; {os.cpu_count()} cores; " + (", ".join(have) or "none of " + str(SHOWN_FLAGS))


# -- drift ----------------------------------------------------------------------------------


def plugin_outputs(path: Path, dtype: str, texts: list[str], gpu: bool) -> dict[str, Any]:
    """The plugin offline at ``dtype``, in a process of its own (one engine at a time)."""
    out = Path(tempfile.mkdtemp()) / "out.json"
    done = subprocess.run(
        [sys.executable, __file__, "plugin-worker", str(path), dtype, str(out), str(int(gpu))],
        input=json.dumps(texts),
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,  # its stderr is the error
    )
    if done.returncode != 0:
        raise RuntimeError(f"the plugin at {dtype} on {path} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def plugin_worker(path: str, dtype: str, out: str, gpu: str) -> None:
    from vllm import LLM

    from tests.support.drift import plugin_as_flag

    texts = json.loads(sys.stdin.read())
    llm = LLM(**engine_kwargs(gpu == "1", model=path, dtype=dtype, max_model_len=1024))
    items = []
    for i in range(0, len(texts), 16):  # within the ColBERT values a response may hold
        data = {"input": texts[i : i + 16], "return_dense": True, "return_colbert_vecs": True}
        (result,) = llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
        items += result.outputs.model_dump()["data"]
    flag = plugin_as_flag(items)
    Path(out).write_text(
        json.dumps(
            {
                "lexical_weights": flag["lexical_weights"],
                "dense_vecs": flag["dense_vecs"].tolist(),
                "colbert_vecs": [c.tolist() for c in flag["colbert_vecs"]],
            }
        )
    )
    llm.llm_engine.engine_core.shutdown()


def w8a8_dir(size: str) -> Path:
    path = MODELS_DIR / f"bge-m3-{size}-w8a8"
    if not (path / "config.json").exists():
        raise SystemExit(
            f"--w8a8: no {path}; make it: python benchmarks/make_w8a8.py "
            f"{model_dir(size)} {path} (its docstring says in which venv)"
        )
    return path


def drift_runs(
    path: Path, size: str, dtypes: list[str], texts: list[str], gpu: bool, w8a8: bool
) -> dict[str, Any]:
    """Every run of the table, FlagEmbedding's float32 (the reference) first."""
    from tests.support.drift import flag_at
    from tests.support.parity import flag_all

    device = "cuda" if gpu else "cpu"
    runs = {"FlagEmbedding float32": flag_all(flag_at(path, "float32", device), texts)}
    for dtype in dtypes:
        runs[f"FlagEmbedding {dtype}"] = flag_all(flag_at(path, dtype, device), texts)
    for dtype in (["float32"] if not gpu else []) + dtypes:
        runs[f"plugin {dtype}"] = plugin_outputs(path, dtype, texts, gpu)
    if w8a8:
        runs["plugin W8A8 int8"] = plugin_outputs(w8a8_dir(size), "bfloat16", texts, gpu)
    if not gpu:
        from _onnx_peer import OnnxM3, export

        threads = int(CPU_ENGINE_ENV["OMP_NUM_THREADS"])
        for kind in ("int8", "float32"):
            graph = export(path, MODELS_DIR / f"onnx-{size}", kind == "int8")
            runs[f"ONNX Runtime {kind}"] = OnnxM3(path, graph, threads).encode(texts, colbert=True)
    return runs


def bench_drift(sizes: list[str], n_texts: int, dtypes: list[str], gpu: bool, w8a8: bool) -> None:
    from tests.support.drift import drift
    from tests.support.texts import LONG_TEXT, PARITY_TEXTS

    texts = [t for t in PARITY_TEXTS.values() if t] + [LONG_TEXT] + corpus(n_texts, seed=3)
    print(f"texts: {len(texts)} (the parity cases, a long one, {n_texts} of bench_index's corpus)")
    print(
        "each run against FlagEmbedding float32 (median and largest relative error of the weights"
        " above 1 % of their text's largest, the top-10 tokens kept, texts whose token set"
        " changed, the smallest dense and ColBERT cosines), its median against FlagEmbedding"
        " float16, and the plugin's median over FlagEmbedding's at the same precision (x FE)"
    )
    header = f"{'model':<8} {'run':<24} {'median rel':>10} {'x FE':>5} {'max rel':>8} "
    header += f"{'top-10':>6} {'sets':>4} {'dense cos':>10} {'colbert cos':>11} {'vs FE fp16':>10}"
    for size in sizes:
        path = model_dir(size) if size in SPECS else Path(size)
        runs = drift_runs(path, size, dtypes, texts, gpu, w8a8)
        reference = runs.pop("FlagEmbedding float32")
        fp16 = runs.get("FlagEmbedding float16")
        print(header)
        medians: dict[str, float] = {}
        for name, run in runs.items():
            d = drift(reference, run)
            dtype = name.split()[-1]
            if name.startswith("FlagEmbedding"):
                medians[dtype] = d.median_rel
            mine = name.startswith("plugin") and dtype in medians
            ratio = f"{d.median_rel / medians[dtype]:5.2f}" if mine else "    -"
            against = (
                f"{drift(fp16, run).median_rel:10.2e}" if fp16 and run is not fp16 else "         -"
            )
            print(
                f"{Path(size).name[:8]:<8} {name:<24} {d.median_rel:10.2e} {ratio} "
                f"{d.max_rel:8.2e} {d.top_k:6.2f} {d.set_changes:4d} "
                f"{d.dense_cos:10.7f} {d.colbert_cos:11.7f} {against}"
            )


# -- speed ----------------------------------------------------------------------------------


class Worker:
    """An engine (or the ONNX peer) in a process of its own, timing one task per line."""

    def __init__(self, kind: str, path: Path, n_docs: int) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "speed-worker", kind, str(path), str(n_docs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.read()

    def read(self) -> dict[str, Any]:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith("{"):
                return json.loads(line)
        self.log.seek(0)
        raise RuntimeError(f"worker exited with {self.proc.wait()}:\n{self.log.read()[-3000:]}")

    def run(self, task: str) -> float:
        self.proc.stdin.write(task + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return float(self.read()["seconds"])

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(timeout=120)


def speed_worker(kind: str, path: str, n_docs: int) -> None:
    docs = corpus(n_docs)
    engine, _, dtype = kind.partition(":")
    if engine == "vllm":
        from vllm import LLM

        # One call holds 512 documents' ColBERT vectors, past the server's
        # bound of one response (an API server's, not an offline batch's).
        os.environ[MAX_COLBERT_VALUES_ENV] = str(2**31)

        llm = LLM(
            **engine_kwargs(
                False,
                model=path,
                dtype=dtype,
                max_model_len=1024,
                max_num_batched_tokens=16384,
                max_num_seqs=256,
            )
        )

        def encode(task: str) -> None:
            for i in range(0, len(docs), 512):
                data = {"input": docs[i : i + 512], **TASKS[task]}
                llm.encode({"data": data}, pooling_task="plugin", use_tqdm=False)
    else:
        from _onnx_peer import OnnxM3, export

        size = Path(path).name.removeprefix("bge-m3-")  # the ONNX graph's folder
        peer = OnnxM3(
            Path(path),
            export(Path(path), MODELS_DIR / f"onnx-{size}", dtype == "int8"),
            int(CPU_ENGINE_ENV["OMP_NUM_THREADS"]),
        )

        def encode(task: str) -> None:
            peer.encode(docs, colbert=task == "all three")

    encode("sparse")  # warm-up
    out = sys.__stdout__
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        start = time.perf_counter()
        encode(line.strip())
        out.write(json.dumps({"seconds": time.perf_counter() - start}) + "\n")
        out.flush()


def bench_speed(size: str, n_docs: int, rounds: int, index_rounds: int, w8a8: bool) -> None:
    path = model_dir(size)
    kinds = [f"vllm:{d}" for d in DTYPES] + ["onnx:int8", "onnx:float32"]
    if w8a8:
        kinds.append("vllm W8A8:bfloat16")
    times: dict[tuple[str, str], list[float]] = {}
    # One runner alive at a time (five engines at once ran out of this
    # machine's 24 GiB): its rounds alternate the tasks, not the runners.
    for kind in kinds:
        where = w8a8_dir(size) if kind.startswith("vllm W8A8") else path
        worker = Worker(kind.replace("vllm W8A8", "vllm"), where, n_docs)
        for _ in range(rounds):
            for task in TASKS:
                times.setdefault((kind, task), []).append(worker.run(task))
        worker.close()
    docs = corpus(n_docs)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (*DTYPES, "auto"):
            for _ in range(index_rounds):
                seconds, _, _ = run_command(path, docs, Path(tmp), False, dtype=dtype)
                times.setdefault((f"index:{dtype}", "sparse"), []).append(seconds)
    chosen = choose_precision("auto", False, cpu_flags()).dtype
    print(f"{'path':<34} {'task':<10} {'best s':>7} {'docs/s':>7} {'/ vLLM fp32':>11}  rounds")
    for (kind, task), values in times.items():
        engine, _, dtype = kind.partition(":")
        base = min(times[("vllm:float32", task)])
        label = {
            "vllm": f"vLLM + plugin, {dtype}",
            "vllm W8A8": "vLLM + plugin, W8A8 int8",
            "onnx": f"ONNX Runtime, {dtype}",
            "index": "index command, "
            + (f"no --dtype ({chosen})" if dtype == "auto" else f"--dtype {dtype}"),
        }[engine]
        best = min(values)
        print(
            f"{label:<34} {task:<10} {best:7.2f} {n_docs / best:7.1f} {base / best:11.2f}  "
            + ", ".join(f"{v:.2f}" for v in values)
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "plugin-worker":
        return plugin_worker(*sys.argv[2:6])
    if len(sys.argv) > 1 and sys.argv[1] == "speed-worker":
        use_cpu_engine_env()
        return speed_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["drift", "speed"])
    parser.add_argument("--sizes", default="small,mid,deep", help="sizes or model folders")
    parser.add_argument("--dtypes", default="float16,bfloat16", help="the half precisions")
    parser.add_argument("--gpu", action="store_true", help="drift on the GPU: no ONNX peer")
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--model", default="mid")
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--index-rounds", type=int, default=1, help="runs of the command per dtype")
    parser.add_argument(
        "--w8a8", action="store_true", help="the int8 W8A8 checkpoint too (benchmarks/make_w8a8.py)"
    )
    args = parser.parse_args()
    use_cpu_engine_env()
    print_settings(
        cpu=cpu_line(), part=args.part, chosen=choose_precision(None, False, cpu_flags()).line()
    )
    if args.part == "drift":
        bench_drift(args.sizes.split(","), args.texts, args.dtypes.split(","), args.gpu, args.w8a8)
    else:
        bench_speed(args.model, args.docs, args.rounds, args.index_rounds, args.w8a8)


if __name__ == "__main__":
    main()
