#!/usr/bin/env bash
# Set up (once), start a server with the plugin on the built-in small model,
# and run examples/hybrid_search_milvus.py against it: dense + sparse
# embeddings stored in Milvus Lite, then sparse, dense and hybrid searches.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
MODEL_DIR=models/bge-m3-tiny
PORT=${PORT:-8000}
export TOKENIZERS_PARALLELISM=false

echo "== building the small random BGE-M3-shaped model in $MODEL_DIR"
"$PY" -m bge_m3_sparse_plugin.tiny_model "$MODEL_DIR"
echo "== starting the server on port $PORT (log: models/server.log)"
source scripts/_serve.sh
start_server "$MODEL_DIR" "$PORT" models/server.log
echo "== examples/hybrid_search_milvus.py"
rm -f models/hybrid.db
"$PY" examples/hybrid_search_milvus.py --url "http://127.0.0.1:$PORT" --db models/hybrid.db
