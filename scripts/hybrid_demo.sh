#!/usr/bin/env bash
# Set up (once), start a server with the plugin on the built-in small model,
# and run examples/hybrid_search_milvus.py against it: dense + sparse
# embeddings stored in Milvus Lite, then sparse, dense and hybrid searches.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_common.sh

# The small model has 1024 positions: vLLM would allow 1026 (the README says why).
start_server models/server.log --max-model-len 1024
echo "== examples/hybrid_search_milvus.py"
rm -rf models/hybrid.db  # Milvus Lite keeps its data in a folder of that name
"$PY" examples/hybrid_search_milvus.py --url "http://127.0.0.1:$PORT" --db models/hybrid.db
