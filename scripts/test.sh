#!/usr/bin/env bash
# Set up (once) and run every test: lint, then unit tests, a real vLLM engine,
# real vLLM servers and a real FlagEmbedding; then, when no test is named, the
# Ray tests on the oldest Ray allowed (2.50) and the interface tests with the
# CUDA builds of vLLM 0.33 and 0.34 (their own venv), and the built wheel in
# a fresh venv (scripts/test_wheel.sh). Every phase runs whatever
# the others did; a summary of each phase's result ends the output, and the
# exit status is 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phases.sh
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
# Lint and format first: seconds, and a red here needs no engine to explain.
phase "ruff check" .venv/bin/ruff check .
phase "ruff format" .venv/bin/ruff format --check .
phase "mypy" .venv/bin/mypy  # strict, on src/ ([tool.mypy] in pyproject.toml)
phase "pytest" .venv/bin/python -m pytest "$@"
named=""
for arg in "$@"; do
  case "$arg" in
    -*) ;;
    *) named=1 ;;
  esac
done
if [ -n "$named" ]; then  # tests named: those only
  skip "Ray 2.50" "tests named"
  skip "vLLM 0.33 and 0.34" "tests named"
  skip "the wheel" "tests named"
else
  phase "Ray 2.50" bash scripts/test_ray_versions.sh -q
  phase "vLLM 0.33 and 0.34" bash scripts/test_vllm_versions.sh -q
  phase "the wheel" bash scripts/test_wheel.sh
fi
summary
