"""The entry point vLLM loads, and the cheap import it promises."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from vllm.plugins import IO_PROCESSOR_PLUGINS_GROUP
from vllm.plugins.io_processors.interface import IOProcessor
from vllm.utils.import_utils import resolve_obj_by_qualname

from bge_m3_sparse_plugin.processor import BgeM3SparseProcessor


def test_entry_point_resolves_to_the_processor():
    assert IO_PROCESSOR_PLUGINS_GROUP == "vllm.io_processor_plugins"
    (ep,) = [e for e in entry_points(group=IO_PROCESSOR_PLUGINS_GROUP) if e.name == "bge_m3_sparse_plugin"]
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
