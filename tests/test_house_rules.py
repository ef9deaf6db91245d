"""The house bars, held by CI: no function of the package over 60 lines,
and the IO processor's class (the glue between vLLM and the pure parts) at
most 240 (what is not glue has its own module)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "bge_m3_sparse_plugin"
MAX_FUNCTION_LINES = 60
MAX_PROCESSOR_LINES = 240


def _lengths() -> dict[str, int]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{path.relative_to(SRC)}:{node.name}"
                found[name] = node.end_lineno - node.lineno + 1
    return found


def test_no_function_is_over_60_lines():
    lengths = _lengths()
    functions = {
        name: n
        for name, n in lengths.items()
        if n > MAX_FUNCTION_LINES and not name.split(":")[1][0].isupper()
    }
    assert functions == {}


def test_the_processor_class_is_at_most_240_lines():
    assert _lengths()["serving/processor.py:BgeM3SparseProcessor"] <= MAX_PROCESSOR_LINES
