"""README.md's code blocks, run or checked, so that the docs cannot drift.

Every ```python and ```bash block is accounted for:
- a block that quotes an example file ("`examples/NAME.py`, which ..." or
  "From `examples/NAME.py`" just before it) is that file's lines, in order;
- a server command is the command the tests' servers run (tests/support/server.py);
- a block followed by an output block is run (the curl lines against the
  tests' servers, on their ports; the offline example on the tests' model),
  and prints that output: the same text, request ids and times aside, and
  the same numbers within 1e-5;
- the rest are in NOT_RUN, each with the reason and what covers it instead.
A new block that is none of these fails test_every_block_is_accounted_for.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support.server import SERVED_MODEL_NAME, server_command

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

# Blocks not run here, by what they hold (the first match counts): why, and
# what checks them instead.
NOT_RUN = {
    "bge-m3-sparse index": "its output holds timings; tests/test_index.py and "
    "tests/test_index_ray.py run the same command and check what it writes",
    "./scripts/demo.sh": "the demo itself (3 minutes): each of its examples is run by a test",
    "pip install 'bge-m3-sparse-plugin[cuda]'": "installs from PyPI: scripts/setup.sh installs the "
    "same extras from the checkout, and tests/test_client_install.py the [client] extra",
    "source .venv/bin/activate": "sets up a shell: the tests build the same model "
    "(conftest.model_dir, build_tiny_model's defaults) and run from the same .venv",
    "vllm serve BAAI/bge-m3": "needs a GPU and bge-m3; the same arguments as the CPU commands checked here",
    "./scripts/hybrid_demo.sh": "tests/test_hybrid_example.py runs its example against a real server",
    "export VLLM_CPU_OMP_THREADS_BIND": "sets variables; benchmarks/_common.py uses the same ones",
}


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int
    before: str  # the paragraph just before the block
    output: str | None  # the block that follows at once (its output), if any


def readme_blocks() -> list[Block]:
    fence = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
    found = list(fence.finditer(README))
    blocks = []
    for i, match in enumerate(found):
        nxt = found[i + 1] if i + 1 < len(found) else None
        follows = nxt is not None and nxt.start() == match.end() and nxt[1] in ("", "json")
        if match[1] in ("", "json") and i and found[i - 1].end() == match.start():
            continue  # an output block: read with the block before it
        before = README[: match.start()].rstrip("\n").rsplit("\n\n", 1)[-1]
        line = README.count("\n", 0, match.start()) + 1
        blocks.append(Block(match[1], match[2], line, before, nxt[2] if follows else None))
    return [b for b in blocks if b.lang in ("python", "bash")]


BLOCKS = readme_blocks()


def _id(block: Block) -> str:
    return f"line{block.line}"


def quoted_example(block: Block) -> str | None:
    names = re.findall(r"`(examples/[\w.]+\.py)`", block.before[-300:])
    return names[-1] if block.lang == "python" and names else None


def is_server_command(block: Block) -> bool:
    return "vllm.entrypoints.openai.api_server" in block.code or "vllm_cli serve" in block.code


def not_run_reason(block: Block) -> str | None:
    return next((why for held, why in NOT_RUN.items() if held in block.code), None)


def test_every_block_is_accounted_for():
    unaccounted = [
        f"README.md line {b.line}: {b.code.splitlines()[0]!r}"
        for b in BLOCKS
        if not (
            quoted_example(b) or is_server_command(b) or b.output is not None or not_run_reason(b)
        )
    ]
    assert not unaccounted, (
        "run, check or list these blocks in tests/test_readme.py:\n" + "\n".join(unaccounted)
    )
    kinds = [bool(quoted_example(b)) for b in BLOCKS], [b.output is not None for b in BLOCKS]
    assert sum(kinds[0]) >= 5 and sum(kinds[1]) >= 8  # the checks below have work to do


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("block", [b for b in BLOCKS if quoted_example(b)], ids=_id)
def test_each_quoted_block_is_in_its_example(block):
    name = quoted_example(block)
    lines, source = _lines(block.code), _lines((ROOT / name).read_text())
    assert lines
    starts = [i for i, line in enumerate(source) if line == lines[0]]
    assert any(source[i : i + len(lines)] == lines for i in starts), (
        f"README.md line {block.line} quotes {name}, but these lines are not in it:\n{block.code}"
    )


def _options(command: str) -> tuple[list[str], dict[str, str]]:
    """The first command line with options: its program words and --option values."""
    lines = command.replace("\\\n", " ").splitlines()
    first = next(line for line in lines if " --" in line)
    words = shlex.split(first.split(">")[0].rstrip(" &"))
    start = next(i for i, w in enumerate(words) if w.startswith("--"))
    options = {}
    for i in range(start, len(words), 2):
        assert words[i].startswith("--"), f"{words[i]!r} is not an --option: {first}"
        options[words[i]] = words[i + 1]
    options.pop("--served-model-name", None)  # the tests name theirs; the README need not
    return words[:start], options


@pytest.mark.parametrize("block", [b for b in BLOCKS if is_server_command(b)], ids=_id)
def test_server_commands_are_the_tests_servers(block):
    launcher = "serve" if "vllm_cli serve" in block.code else "api_server"
    program, options = _options(block.code)
    port = int(options["--port"])
    base = _options(shlex.join(server_command("models/bge-m3-tiny", port, [], launcher)))[1]
    extra = [word for key in options.keys() - base.keys() for word in (key, options[key])]
    tests_program, tests_options = _options(
        shlex.join(server_command("models/bge-m3-tiny", port, extra, launcher))
    )
    assert program[1:] == tests_program[1:]  # python -m ...; the tests run their own python
    assert options == tests_options


# -- blocks run here, and what they print ------------------------------------

_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def assert_same_output(got: str, want: str, where: str) -> None:
    """Equal but for request ids and times; numbers within 1e-5 relative."""

    def split(text: str) -> tuple[str, list[float]]:
        text = re.sub(r"pooling-[0-9a-f]+", "pooling-ID", text)
        text = re.sub(r'("created_at":\s*)\d+', r"\1T", text)
        return re.sub(r"\s+", "", _NUMBER.sub("N", text)), [float(x) for x in _NUMBER.findall(text)]

    (got_text, got_numbers), (want_text, want_numbers) = split(got), split(want)
    assert got_text == want_text, f"{where} printed:\n{got}\nREADME.md shows:\n{want}"
    assert len(got_numbers) == len(want_numbers)
    for g, w in zip(got_numbers, want_numbers):
        assert math.isclose(g, w, rel_tol=1e-5, abs_tol=1e-6), f"{where}: {g} != {w}\n{got}"


def stdout_of(command: list[str], **kw: object) -> str:
    """What ``command``, run in the checkout, prints; it must succeed."""
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, **kw)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def run_bash(code: str, ports: dict[int, int]) -> str:
    for readme_port, port in ports.items():
        code = code.replace(f"127.0.0.1:{readme_port}", f"127.0.0.1:{port}")
    return stdout_of(["bash", "-c", code])


def _ran(kind: str) -> list[Block]:
    return [
        b for b in BLOCKS if b.output is not None and not not_run_reason(b) and _kind(b) == kind
    ]


def _kind(block: Block) -> str:
    if quoted_example(block):
        return "example"
    if block.lang == "python":
        return "keyed" if "api_key=" in block.code else "python"
    if "examples/offline.py" in block.code:
        return "offline"
    if "s3cret" in block.code:
        return "keyed"
    return "colbert" if "127.0.0.1:8001" in block.code else "server"


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("server"), ids=_id)
def test_curl_blocks_print_what_the_readme_shows(block, server):
    got = run_bash(block.code, {8000: server.port})
    assert_same_output(got, block.output, f"README.md line {block.line}")


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("example"), ids=_id)
def test_quoted_examples_print_what_the_readme_shows(block, server):
    got = stdout_of([sys.executable, quoted_example(block), "--url", server.url])
    assert_same_output(got, block.output, quoted_example(block))


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("colbert"), ids=_id)
def test_colbert_blocks_print_what_the_readme_shows(block, colbert_server):
    got = run_bash(block.code, {8001: colbert_server.port})
    assert_same_output(got, block.output, f"README.md line {block.line}")


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("keyed"), ids=_id)
def test_api_key_blocks_print_what_the_readme_shows(block, keyed_server):
    if block.lang == "bash":
        got = run_bash(block.code, {8000: keyed_server.port})
    else:
        code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{keyed_server.port}")
        got = stdout_of([sys.executable, "-c", code])
    assert_same_output(got, block.output, f"README.md line {block.line}")


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("offline"), ids=_id)
def test_the_offline_example_prints_what_the_readme_shows(block, model_dir):
    code = block.code.replace("models/bge-m3-tiny", str(model_dir))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    got = stdout_of(["bash", "-c", code], env=env)
    assert_same_output(got, block.output, f"README.md line {block.line}")


@pytest.mark.engine
def test_the_seed_request_prints_what_the_readme_shows(server):
    """The first output in README.md, from examples/online_curl.sh."""
    shown = re.search(r"examples/online_curl\.sh`.*?\n```json\n(.*?)```", README, re.S)
    assert shown, "README.md shows no output of examples/online_curl.sh"
    got = stdout_of(["bash", "examples/online_curl.sh", server.url, SERVED_MODEL_NAME])
    assert_same_output(got, shown[1], "examples/online_curl.sh")
