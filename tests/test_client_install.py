"""`pip install '.[client]'` in a fresh venv: no vLLM, no torch, and the client works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import importlib.util, json, sys
from bge_m3_sparse_plugin.client import SparseEmbeddingClient
heavy = [m for m in ("vllm", "torch", "transformers") if importlib.util.find_spec(m)]
with SparseEmbeddingClient(sys.argv[1]) as client:
    result = client.embed(["I love China", "hi, bge-m3"], return_tokens=True)
print(json.dumps({"heavy": heavy, "result": result.model_dump(include={"data", "usage"})}))
"""


def test_client_extra_installs_and_works_without_vllm(server, tmp_path):
    venv = tmp_path / "client-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            f"{ROOT}[client]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    out = subprocess.run(
        [str(python), "-c", SCRIPT, server.url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the checkout, so that the installed package is the one imported
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    assert got["heavy"] == []
    with SparseEmbeddingClient(server.url) as client:
        want = client.embed(["I love China", "hi, bge-m3"], return_tokens=True)
    assert got["result"] == want.model_dump(include={"data", "usage"})
