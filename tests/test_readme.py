"""The README's code blocks that quote an example file are that file's code:
each such block's lines appear, in order and together, in the file it names
("From `examples/NAME.py`" or "`examples/NAME.py`, which ..." just before it),
so that the docs cannot drift from the examples the demo runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

# A ```python block, and the text of the paragraph just before it.
_BLOCK = re.compile(r"(?P<before>[^\n]*(?:\n[^\n`]+)*)\n\n?```python\n(?P<code>.*?)```", re.S)


def quoted_blocks() -> list[tuple[str, str]]:
    found = []
    for match in _BLOCK.finditer(README):
        names = re.findall(r"`(examples/[\w.]+\.py)`", match["before"][-300:])
        if names:
            found.append((names[-1], match["code"]))
    return found


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_the_readme_quotes_examples():
    names = [name for name, _ in quoted_blocks()]
    assert "examples/langchain_hybrid.py" in names
    assert "examples/llamaindex_hybrid.py" in names
    assert "examples/haystack_hybrid.py" in names


@pytest.mark.parametrize("name,code", quoted_blocks(), ids=[n for n, _ in quoted_blocks()])
def test_each_quoted_block_is_in_its_example(name, code):
    block, source = _lines(code), _lines((ROOT / name).read_text())
    assert block
    starts = [i for i, line in enumerate(source) if line == block[0]]
    assert any(source[i : i + len(block)] == block for i in starts), (
        f"README's block quoting {name} is not in that file:\n{code}"
    )
