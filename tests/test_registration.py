"""The entry point vLLM loads, and the cheap import it promises."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from vllm.plugins import IO_PROCESSOR_PLUGINS_GROUP
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.utils.import_utils import resolve_obj_by_qualname

from bge_m3_sparse_plugin import (
    PROCESSOR_QUALNAME,
    check_vllm_version,
    installed_vllm_version,
    register,
)
from bge_m3_sparse_plugin.serving.processor import BgeM3SparseProcessor


def test_entry_point_resolves_to_the_processor():
    assert IO_PROCESSOR_PLUGINS_GROUP == "vllm.io_processor_plugins"
    (ep,) = [
        e
        for e in entry_points(group=IO_PROCESSOR_PLUGINS_GROUP)
        if e.name == "bge_m3_sparse_plugin"
    ]
    qualname = ep.load()()
    cls = resolve_obj_by_qualname(qualname)
    assert cls is BgeM3SparseProcessor
    assert issubclass(cls, IOProcessor)


def test_importing_the_package_imports_neither_vllm_nor_torch():
    code = (
        "import sys, bge_m3_sparse_plugin as p; p.register();"
        "heavy = sorted(m for m in ('vllm', 'torch', 'transformers') if m in sys.modules);"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_client_imports_without_vllm_or_torch():
    # vLLM and torch made unimportable: the client and the score helper still load.
    code = (
        "import sys; sys.modules.update(vllm=None, torch=None, transformers=None, numpy=None);"
        "from bge_m3_sparse_plugin.client import SparseEmbeddingClient, AsyncSparseEmbeddingClient, "
        "lexical_matching_score;"
        "print(lexical_matching_score({'5': 0.5}, {'indices': [5], 'values': [2.0]}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


@pytest.mark.parametrize(
    "version", ["0.32.0", "0.32.0+cpu", "0.33.1", "0.34.0", "0.34.2.dev5+g1234"]
)
def test_supported_vllm_versions_pass(version):
    check_vllm_version(version)


@pytest.mark.parametrize(
    "version,says",
    [
        ("0.31.2", "vLLM 0.31.2 is installed"),
        ("0.35.0", "vLLM 0.35.0 is installed"),
        ("1.0.0", "vLLM 1.0.0 is installed"),
        ("dev", "cannot tell which vLLM release 'dev' is"),
    ],
)
def test_other_vllm_versions_are_refused_with_the_supported_range(version, says):
    with pytest.raises(RuntimeError) as info:
        check_vllm_version(version)
    message = str(info.value)
    assert says in message
    assert "supports vLLM >=0.32,<0.35" in message and "BGE_M3_SPARSE_ANY_VLLM=1" in message


def test_register_checks_the_running_vllm(monkeypatch):
    import vllm

    assert installed_vllm_version() == vllm.__version__
    assert register() == PROCESSOR_QUALNAME
    monkeypatch.setattr(vllm, "__version__", "0.35.0")
    with pytest.raises(RuntimeError, match=r"vLLM 0\.35\.0 is installed"):
        register()
    monkeypatch.setenv("BGE_M3_SPARSE_ANY_VLLM", "1")
    assert register() == PROCESSOR_QUALNAME


def test_version_and_vllm_range_have_one_source_each():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the declared minimum, 3.10: the [test] extra brings tomli
        import tomli as tomllib
    from importlib.metadata import version
    from pathlib import Path

    from bge_m3_sparse_plugin import VLLM_CPU_RELEASE, __version__, vllm_range

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert __version__ == project["version"] == version("bge-m3-sparse-plugin")
    extras = project["optional-dependencies"]
    assert extras["cuda"] == [f"vllm{vllm_range()}"]
    assert extras["cpu"] == [f"vllm-cpu=={VLLM_CPU_RELEASE}"]
    pinned = tuple(int(x) for x in VLLM_CPU_RELEASE.split(".")[:2])
    from bge_m3_sparse_plugin import SUPPORTED_VLLM

    assert SUPPORTED_VLLM[0] <= pinned <= SUPPORTED_VLLM[1]
