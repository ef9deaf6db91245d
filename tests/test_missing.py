"""is_missing: an absent module against one that is installed and broken,
with the errors that real imports raise."""

from __future__ import annotations

import sys

import pytest

from bge_m3_sparse_plugin._missing import is_missing


def import_error(module: str, tmp_path, monkeypatch, source: str | None = None) -> ImportError:
    """What ``import module`` raises: blocked as absent (None in sys.modules,
    as pip leaves nothing), or a package whose own code fails."""
    if source is None:
        monkeypatch.setitem(sys.modules, module, None)
    else:
        (tmp_path / module).mkdir()
        (tmp_path / module / "__init__.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError) as info:
        __import__(module)
    return info.value


def test_an_absent_module_is_missing(tmp_path, monkeypatch):
    exc = import_error("fakeray", tmp_path, monkeypatch)
    assert is_missing(exc, "fakeray")
    assert is_missing(exc, "fakeray.data")  # the package above is absent: so is the subpackage
    assert not is_missing(exc, "pyarrow")


def test_a_broken_module_is_not_missing(tmp_path, monkeypatch):
    exc = import_error(
        "faketorch",
        tmp_path,
        monkeypatch,
        'raise ImportError("libtorch_cpu.so: cannot open shared object file")\n',
    )
    assert not is_missing(exc, "faketorch")


def test_a_module_whose_own_dependency_is_absent_is_not_missing(tmp_path, monkeypatch):
    exc = import_error("fakevllm", tmp_path, monkeypatch, "import no_such_dependency_here\n")
    assert not is_missing(exc, "fakevllm")
    assert is_missing(exc, "fakevllm", "no_such_dependency_here")  # named: part of the extra
