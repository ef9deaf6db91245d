#!/usr/bin/env bash
# Set up (once) and run every test: unit tests, then a real vLLM engine, two
# real vLLM servers and a real FlagEmbedding.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
