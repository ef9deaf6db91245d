#!/usr/bin/env bash
# The plugin against the CUDA builds of vLLM that `pip install
# 'bge-m3-sparse-plugin[cuda]'` gives GPU users, on a machine without a GPU:
# no engine starts, but vLLM's loader, config, renderer, pooling path and
# API-key middleware all run (tests/test_vllm_interface.py, tests/test_guard.py).
#
# - vLLM 0.33.0, as the resolver installs it with the [cuda] extra where the
#   registry lacks flashinfer-python 0.7.3, which vLLM 0.34.0 pins;
# - then vLLM 0.34.0's wheel over it with --no-deps: 0.34's Python code on
#   0.33's dependencies (torch 2.14, the CUDA 13 libraries).
#
# Its own venv (about 9.5 GB), reused while pyproject.toml and this script are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV_VLLM_CUDA:-.venv-vllm-cuda}
PYTHON=${PYTHON:-python3}
stamp="$VENV/.installed-$(cat pyproject.toml "$0" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV (vLLM 0.33.0 and 0.34.0, CUDA builds): a few minutes" >&2
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -e '.[cuda]' 'vllm==0.33.0' 'pytest>=8'
  for version in 0.33.0 0.34.0; do
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$VENV/wheels" \
      "vllm==$version"
  done
  touch "$stamp"
fi
for version in 0.33.0 0.34.0; do
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --force-reinstall \
    "$VENV"/wheels/vllm-"$version"-*.whl
  installed=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("vllm"))')
  if [ "$installed" != "$version" ]; then
    echo "expected vLLM $version in $VENV, found $installed" >&2
    exit 1
  fi
  echo "== vLLM $installed (CUDA build, no GPU): the plugin's interface tests" >&2
  # --noconftest: the main suite's fixtures start servers and need the [test] extra.
  "$VENV/bin/python" -m pytest --noconftest -p no:cacheprovider "$@" \
    tests/test_vllm_interface.py tests/test_guard.py
done
