"""The facts that the pages and the examples write again, held to their one source.

Users copy the examples and the docs' commands, so those keep their literal
copies; each copy must equal the package's own (``_config.py``, ``__init__``).
The package's own docstrings and comments name the constant instead of
writing its value, and leave figures and history to RESULTS and the CHANGELOG.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

from bge_m3_sparse_plugin import __version__
from bge_m3_sparse_plugin._config import (
    ADAPTER_BATCH_SIZE,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_INPUTS,
    DEFAULT_MAX_QUERY_LENGTH,
    ENVIRONMENT,
    HF_OVERRIDES,
    PLUGIN_NAME,
    SUPPORTED_VLLM,
    VLLM_CPU_RELEASE,
    vllm_range,
)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "examples").glob("*.sh"))
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))
SOURCES = sorted((ROOT / "src" / "bge_m3_sparse_plugin").rglob("*.py"))


def _texts(paths: list[Path]) -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in paths}


def test_every_hf_overrides_copy_is_the_packages():
    found = []
    for name, text in _texts(PAGES + EXAMPLES + SCRIPTS).items():
        for flag in re.findall(r"--hf-overrides '([^']*)'", text):
            found.append((name, json.loads(flag)))
        if name.endswith(".py"):
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.keyword) and node.arg == "hf_overrides":
                    found.append((name, ast.literal_eval(node.value)))
    assert {name for name, _ in found} >= {"README.md", "docs/serving.md", "examples/offline.py"}
    assert [(name, value) for name, value in found if value != HF_OVERRIDES] == []


def test_every_plugin_name_copy_is_the_packages():
    for name, text in _texts(PAGES + EXAMPLES).items():
        for value in re.findall(r"io[-_]processor[-_]plugin[ =]+[\"']?([\w.]+)", text):
            assert value == PLUGIN_NAME, name


def test_the_vllm_range_and_cpu_release_in_the_pages_are_the_packages():
    ranges, releases = set(), set()
    for text in _texts(PAGES).values():
        ranges |= set(re.findall(r"vllm(>=[\d.]+,<[\d.]+)", text))
        releases |= set(re.findall(r"vllm-cpu==([\d.]+)", text))
    assert ranges == {vllm_range()}
    assert releases == {VLLM_CPU_RELEASE}
    (lo_major, lo_minor), (hi_major, hi_minor) = SUPPORTED_VLLM
    serving = (ROOT / "docs" / "serving.md").read_text()
    assert f"vLLM {lo_major}.{lo_minor} to {hi_major}.{hi_minor}" in serving


def test_the_plugin_version_in_the_pages_is_the_packages():
    for name, text in _texts(PAGES).items():
        for value in re.findall(r"bge[-_]m3[-_]sparse[-_]plugin (\d+\.\d+\.\d+)", text):
            assert value == __version__, name


def test_the_configuration_table_is_the_environment_the_plugin_reads():
    serving = (ROOT / "docs" / "serving.md").read_text()
    section = serving.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \|$", section, re.M)
    assert {name: (default, what) for name, default, what in rows} == ENVIRONMENT


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_count_of_tests_that_would_go_stale(page):
    """Counts of tests and 'newest' releases change with every commit or
    release: the pages do not state them."""
    text = page.read_text()
    assert re.findall(r"\d+ (?:tests )?passed|newest (?:CPU )?(?:build|release)", text) == []


def _prose(path: Path) -> list[tuple[int, str]]:
    """Each docstring and comment of a module, with its line: where a fact is
    written in words rather than in code."""
    text = path.read_text()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), doc))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


(_LO_MAJOR, _LO_MINOR), (_HI_MAJOR, _HI_MINOR) = SUPPORTED_VLLM
# Each constant's value as prose writes it: a docstring names the constant instead.
_VALUES_IN_WORDS = {
    "SUPPORTED_VLLM": rf"{_LO_MAJOR}\.{_LO_MINOR}(?: to |-|\u2013){_HI_MAJOR}\.{_HI_MINOR}",
    "ADAPTER_BATCH_SIZE": rf"\b{ADAPTER_BATCH_SIZE} (?:documents|texts)\b",
    "DEFAULT_MAX_QUERY_LENGTH": rf"\b{DEFAULT_MAX_QUERY_LENGTH}(?: tokens)? by default|"
    rf"by default,? {DEFAULT_MAX_QUERY_LENGTH}\b",
    "DEFAULT_MAX_INPUTS": rf"\b{DEFAULT_MAX_INPUTS:,}|\b{DEFAULT_MAX_INPUTS} (?:texts|inputs)\b",
    "DEFAULT_MAX_CHARS": rf"{DEFAULT_MAX_CHARS:,}|{DEFAULT_MAX_CHARS:_}|"
    rf"\b{DEFAULT_MAX_CHARS // 1_000_000} ?M(?:illion)?[- ]char",
}
# A measurement, or the story of how the code came to be: RESULTS.md and the
# CHANGELOG hold those; a comment says why the code is as it is.
_FIGURES_AND_HISTORY = (
    r"\d+(?:\.\d+)?x (?:faster|slower)|\d+(?:\.\d+)? times (?:faster|slower)|"
    r"\bdoubled\b.*throughput|\d+(?:,\d{3})* rows/s|\bwas tried\b|\bwe tried\b|"
    r"\bRay \d+\.\d+|s of CPU\b"
)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT / "src")))
def test_the_packages_docstrings_name_constants_not_their_values(source):
    found = [
        (line, name, match.group())
        for line, text in _prose(source)
        for name, pattern in _VALUES_IN_WORDS.items()
        for match in re.finditer(pattern, text)
    ]
    assert found == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT / "src")))
def test_the_packages_comments_hold_no_figures_or_history(source):
    found = [
        (line, match.group())
        for line, text in _prose(source)
        for match in re.finditer(_FIGURES_AND_HISTORY, text)
    ]
    assert found == []
