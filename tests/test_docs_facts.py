"""The facts that the pages and the examples write again, held to their one source.

Users copy the examples and the docs' commands, so those keep their literal
copies; each copy must equal the package's own (``_config.py``, ``__init__``).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from bge_m3_sparse_plugin import __version__
from bge_m3_sparse_plugin._config import (
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
