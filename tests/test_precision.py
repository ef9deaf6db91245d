"""The precision the plugin's own engines run at when --dtype is auto: the
rule (pure), this machine's reading of it, the doctor's line and the index
command's, on a real engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bge_m3_sparse_plugin._config import engine_kwargs
from bge_m3_sparse_plugin._precision import choose_precision, cpu_flags

from .support.corpus import index_cmd, read_output, run
from .support.drift import drift, flag_at
from .support.parity import DRIFT_RATIO, MAX_DRIFT_RATIO, NEAR_ZERO_SHARE, flag_all
from .support.texts import generated_texts

BF16 = {"amx_bf16", "avx512_bf16"}
OTHER_FLAGS = ["avx2", "avx512f", "avx512_fp16", "amx_int8", "amx_tile", "fma", "sse4_2", "bf16"]


def proc_flags() -> set[str]:
    """This machine's flags, read here by hand."""
    text = Path("/proc/cpuinfo").read_text()
    line = next(line for line in text.splitlines() if line.startswith(("flags", "Features")))
    return set(line.split(":", 1)[1].split())


@given(st.sets(st.sampled_from(sorted(BF16) + OTHER_FLAGS)))
def test_auto_on_a_cpu_is_bfloat16_with_its_instructions_and_float32_without(flags):
    for requested in (None, "auto"):
        got = choose_precision(requested, gpu=False, flags=frozenset(flags))
        assert got.dtype == ("bfloat16" if flags & BF16 else "float32"), flags
        assert got.reason  # said, with why


@given(st.sets(st.sampled_from(sorted(BF16) + OTHER_FLAGS)))
def test_auto_on_a_gpu_is_vllms_and_a_given_dtype_is_kept(flags):
    assert choose_precision("auto", gpu=True, flags=frozenset(flags)).dtype == "auto"
    for dtype in ("float16", "bfloat16", "float32", "half"):
        for gpu in (True, False):
            got = choose_precision(dtype, gpu=gpu, flags=frozenset(flags))
            assert (got.dtype, got.reason) == (dtype, "as --dtype asked")


def test_this_machines_flags_and_choice():
    assert cpu_flags() == frozenset(proc_flags())
    want = "bfloat16" if proc_flags() & BF16 else "float32"
    assert engine_kwargs(gpu=False)["dtype"] == want
    assert engine_kwargs(gpu=False, dtype="auto")["dtype"] == want
    assert engine_kwargs(gpu=False, dtype="float16")["dtype"] == "float16"
    assert engine_kwargs(gpu=True)["dtype"] == "auto"


def test_flags_of_another_cpu_and_of_none(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "sse", "avx2"}
    info.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")  # arm64's name
    assert cpu_flags(info) == {"fp", "asimd", "bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_doctor_names_vllms_dtype_and_the_commands(model_dir):
    result = subprocess.run(
        [sys.executable, "-m", "bge_m3_sparse_plugin", "doctor", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [raw.strip() for raw in result.stdout.splitlines() if " dtype: " in raw]
    # vLLM's auto on an x86 CPU: float16 (its _resolve_auto_dtype), heads float32.
    want = "bfloat16" if proc_flags() & BF16 else "float32"
    assert line.startswith(
        "advice   dtype: vLLM's auto runs this model at float16 here, its heads at float32; "
        "a matrix product here runs at float16 "
    ), line
    assert f"the index command's auto runs {want} (" in line, line
    out = result.stdout.splitlines()
    at = next(i for i, raw in enumerate(out) if " dtype: " in raw)
    assert out[at + 1].strip() == f"fix: vllm serve ... --dtype {want}"


@pytest.mark.engine
def test_the_index_command_chooses_says_records_and_keeps_parity(model_dir, flag_model, tmp_path):
    """With no --dtype, the command runs this machine's choice, says it in
    one line, records it in the manifest, and its vectors meet the
    half-precision criterion against FlagEmbedding (tests/support/parity.py)."""
    texts = generated_texts(40, 60, seed=41)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"{i:03d}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    cmd = index_cmd(model_dir, corpus, tmp_path / "vectors", "--dense", "--no-progress")
    at = cmd.index("--dtype")
    del cmd[at : at + 2]
    result = run(cmd)
    assert result.returncode == 0, result.stdout + result.stderr
    want = "bfloat16" if proc_flags() & BF16 else "float32"
    said = [line for line in result.stderr.splitlines() if "precision:" in line]
    assert len(said) == 1 and said[0].startswith(f"bge-m3-sparse index: precision: {want}: "), said
    manifest = json.loads((tmp_path / "vectors" / "_manifest.json").read_text())
    assert manifest["job"]["dtype"] == want
    rows = read_output(tmp_path / "vectors")
    assert sorted(rows) == [f"{i:03d}" for i in range(len(texts))]
    got = {
        "lexical_weights": [
            {str(k): v for k, v in zip(rows[i]["indices"], rows[i]["values"])} for i in sorted(rows)
        ],
        "dense_vecs": [rows[i]["dense"] for i in sorted(rows)],
    }
    fp32 = flag_all(flag_model, texts)
    if want == "float32":
        assert drift(fp32, got) == drift(fp32, fp32)  # no drift but the kernels': none here
        return
    ours, theirs = drift(fp32, got), drift(fp32, flag_all(flag_at(model_dir, want), texts))
    assert ours.median_rel <= DRIFT_RATIO * theirs.median_rel, (ours, theirs)
    assert ours.max_rel <= MAX_DRIFT_RATIO * theirs.max_rel, (ours, theirs)
    assert ours.changed_share <= NEAR_ZERO_SHARE, ours
    assert 1 - ours.dense_cos <= MAX_DRIFT_RATIO * (1 - theirs.dense_cos), (ours, theirs)
