#!/usr/bin/env bash
# Set up (once) and run every test: unit tests, then a real vLLM engine, real
# vLLM servers and a real FlagEmbedding; then, when no test is named, the Ray
# tests on the oldest Ray allowed (2.50) and the interface tests with the CUDA
# builds of vLLM 0.33 and 0.34 (their own venv).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
# Lint and format first: seconds, and a red here needs no engine to explain.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # strict, on src/ ([tool.mypy] in pyproject.toml)
.venv/bin/python -m pytest "$@"
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    *) exit 0 ;;  # tests named: those only
  esac
done
bash scripts/test_ray_versions.sh -q
bash scripts/test_vllm_versions.sh -q
