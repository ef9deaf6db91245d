#!/usr/bin/env bash
# Set up (once) and run every test: unit tests, then a real vLLM engine, two
# real vLLM servers and a real FlagEmbedding.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
# Lint and format first: seconds, and a red here needs no engine to explain.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # strict, on src/ ([tool.mypy] in pyproject.toml)
exec .venv/bin/python -m pytest "$@"
