"""README.md's and docs/'s code blocks, run or checked, so that the docs cannot drift.

Every ```python and ```bash block (fenced at any indent, as in a list item) is
accounted for:
- a block that quotes an example file ("`examples/NAME.py`, which ..." or
  "From `examples/NAME.py`" just before it) is that file's lines, in order;
- a server command is the command the tests' servers run (tests/support/server.py);
- a block followed by an output block is run (the curl lines against the
  tests' servers, on their ports; the offline example, the index command and
  the doctor on the tests' model), and prints that output: the same text,
  request ids and times aside, and the same numbers at the digits shown;
- a block without output that talks to the server, or a python block, is run
  against the tests' server and must succeed;
- every `bge-m3-sparse index` command is parsed by the command's own parser,
  and every `vllm serve BAAI/bge-m3` by vLLM's: a flag that is not theirs fails;
- the rest are in NOT_RUN, each with the reason and what covers it instead.
A new block that is none of these fails test_every_block_is_accounted_for.
An indented (unfenced) code block fails test_no_unfenced_code_blocks.

UPDATE_DOCS=1 rewrites the output blocks that differ with what was printed
(then read the diff).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from bge_m3_sparse_plugin._cli import build_parser

from .support.server import server_command

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Blocks not run here, by what they hold (the first match counts): why, and
# what checks them instead.
NOT_RUN = {
    "./scripts/demo.sh": "the demo itself (3 minutes): each of its examples is run by a test",
    "pip install '.[cuda]'": "installs the CUDA build: scripts/setup.sh installs the same "
    "checkout with [cpu], scripts/test_wheel.sh the built wheel with [cpu] in a fresh venv, and "
    "tests/test_client_install.py the [client] extra",
    "python -m build": "builds the wheel: scripts/test_wheel.sh builds it, checks it with twine "
    "and installs it in a fresh venv",
    "./scripts/setup.sh": "sets up .venv: CI runs it (scripts/test.sh)",
    "benchmarks/make_w8a8.py": "makes an int8 checkpoint in a venv of its own (llm-compressor, "
    "which pins other transformers than vLLM's): not in CI; benchmarks/bench_precision.py --w8a8 "
    "runs what it makes with the plugin (benchmarks/RESULTS.md, section 19)",
    "source .venv/bin/activate": "sets up a shell: the tests build the same model "
    "(conftest.model_dir, build_tiny_model's defaults) and run from the same .venv",
    "./scripts/hybrid_demo.sh": "tests/test_hybrid_example.py runs its example against a real server",
    'eval "$(bge-m3-sparse cpu-env)"': "sets variables: tests/test_doctor.py checks what "
    "cpu-env prints",
    "kill $SERVER_PID": "stops the reader's server: the tests stop theirs (tests/support/server.py)",
    "pip install '.[postgres]'": "installs an extra: scripts/setup.sh installs it from the "
    "checkout",
    "from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel": "loads "
    "BAAI/bge-m3 from the hub: tests/test_dropin_flagembedding.py runs the same usage "
    "(tests/support/usage/flagembedding_usage.py) on the small model, on FlagEmbedding and on the "
    "drop-in, and compares the results",
    "from bge_m3_sparse_plugin.integrations.milvus import BGEM3EmbeddingFunction": "loads "
    "BAAI/bge-m3 from the hub: tests/test_dropin_milvus.py runs the same flow "
    "(tests/support/usage/milvus_usage.py) on the small model, on pymilvus-model and on the drop-in",
}


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    code: str
    line: int
    before: str  # the paragraph just before the block
    output: str | None  # the block that follows at once (its output), if any

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)} line {self.line}"


_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```\n", re.S | re.M)


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = list(_FENCE.finditer(text))
    blocks = []
    for i, match in enumerate(found):
        nxt = found[i + 1] if i + 1 < len(found) else None
        follows = nxt is not None and nxt.start() == match.end() and nxt[2] in ("", "json")
        if match[2] in ("", "json") and i and found[i - 1].end() == match.start():
            continue  # an output block: read with the block before it
        before = text[: match.start()].rstrip("\n").rsplit("\n\n", 1)[-1]
        line = text.count("\n", 0, match.start()) + 1
        code = textwrap.dedent(match[3])
        output = textwrap.dedent(nxt[3]) if follows and nxt is not None else None
        blocks.append(Block(page, match[2], code, line, before, output))
    return [b for b in blocks if b.lang in ("python", "bash")]


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def _id(block: Block) -> str:
    return f"{block.page.stem}-line{block.line}"


def quoted_example(block: Block) -> str | None:
    names = re.findall(r"`(examples/[\w.]+\.py)`", block.before[-300:])
    return names[-1] if block.lang == "python" and names else None


def is_server_command(block: Block) -> bool:
    return "vllm.entrypoints.openai.api_server" in block.code or "vllm_cli serve" in block.code


def not_run_reason(block: Block) -> str | None:
    return next((why for held, why in NOT_RUN.items() if held in block.code), None)


def commands(block: Block, program: str) -> list[list[str]]:
    """Each command line of the block that runs ``program``, as words after it."""
    lines = block.code.replace("\\\n", " ").splitlines()
    found = []
    for line in lines:
        if program not in line:
            continue
        words = shlex.split(line.split(" > ")[0].rstrip(" &"), comments=True)
        for i in range(len(words)):
            if words[i : i + len(program.split())] == program.split():
                found.append(words[i + len(program.split()) :])
                break
    return found


def runs_index(block: Block) -> bool:
    return block.lang == "bash" and bool(commands(block, "bge-m3-sparse index"))


def gpu_command(block: Block) -> bool:
    return "vllm serve BAAI/bge-m3" in block.code


def run_against_server(block: Block) -> bool:
    """A block without output that is meant to run beside the reader's server."""
    return (
        block.output is None
        and not (quoted_example(block) or is_server_command(block) or not_run_reason(block))
        and (block.lang == "python" or "127.0.0.1:8000" in block.code)
    )


_RUN_BLOCKS = {b.code for b in BLOCKS if b.output is not None}


def accounted(block: Block) -> bool:
    return bool(
        quoted_example(block)
        or is_server_command(block)
        or block.output is not None
        or runs_index(block)
        or gpu_command(block)
        or not_run_reason(block)
        or run_against_server(block)
        or block.code in _RUN_BLOCKS  # the same lines as a block that is run
    )


def test_every_block_is_accounted_for():
    unaccounted = [f"{b.where}: {b.code.splitlines()[0]!r}" for b in BLOCKS if not accounted(b)]
    assert not unaccounted, (
        "run, check or list these blocks in tests/test_readme.py:\n" + "\n".join(unaccounted)
    )
    assert {b.page.name for b in BLOCKS} >= {"README.md", "serving.md", "security.md", "index.md"}
    kinds = [bool(quoted_example(b)) for b in BLOCKS], [b.output is not None for b in BLOCKS]
    assert sum(kinds[0]) >= 5 and sum(kinds[1]) >= 10  # the checks below have work to do


def test_no_unfenced_code_blocks():
    """An indented code block (four spaces after a blank line, outside a list)
    would be neither run nor checked: write it fenced."""
    found = []
    for page in PAGES:
        text = _FENCE.sub(lambda m: "\n" * m[0].count("\n"), page.read_text())
        lines = text.splitlines()
        for i, line in enumerate(lines[1:], 1):
            prev = lines[i - 1]
            in_list = any(
                re.match(r"\s*([-*]|\d+\.)\s", earlier) for earlier in lines[max(0, i - 20) : i]
            )
            if line.startswith("    ") and line.strip() and not prev.strip() and not in_list:
                found.append(f"{page.relative_to(ROOT)} line {i + 1}: {line.strip()[:60]!r}")
    assert found == []


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("block", [b for b in BLOCKS if quoted_example(b)], ids=_id)
def test_each_quoted_block_is_in_its_example(block):
    name = quoted_example(block)
    lines, source = _lines(block.code), _lines((ROOT / name).read_text())
    assert lines
    starts = [i for i, line in enumerate(source) if line == lines[0]]
    assert any(source[i : i + len(lines)] == lines for i in starts), (
        f"{block.where} quotes {name}, but these lines are not in it:\n{block.code}"
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
    return words[:start], options


@pytest.mark.parametrize("block", [b for b in BLOCKS if is_server_command(b)], ids=_id)
def test_server_commands_are_the_tests_servers(block):
    """The same program and options, the served model name included (the
    examples send it), as the tests' servers."""
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


@pytest.mark.parametrize("block", [b for b in BLOCKS if runs_index(b)], ids=_id)
def test_index_commands_parse_with_the_commands_own_parser(block):
    parser = build_parser()
    for words in commands(block, "bge-m3-sparse index"):
        args = parser.parse_args(["index", *words])  # exits (fails the test) on a bad flag
        assert args.model
        assert "--dtype" in words, (
            "a page's command states its precision (docs/serving.md#precision)"
        )


@pytest.mark.parametrize("block", [b for b in BLOCKS if gpu_command(b)], ids=_id)
def test_gpu_commands_parse_with_vllms_own_parser(block):
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    (words,) = commands(block, "vllm serve")
    args = parser.parse_args(["--model", words[0], *words[1:]])
    assert args.io_processor_plugin == "bge_m3_sparse_plugin"
    assert args.hf_overrides == {"architectures": ["BgeM3OnePassModel"]}
    # The precision stated, not left to auto (docs/serving.md#precision).
    assert "--dtype" in words and args.dtype == "float16"


# -- blocks run here, and what they print ------------------------------------

_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def assert_same_output(
    got: str, want: str, where: str, mask: re.Pattern[str] | None = None
) -> None:
    """Equal but for request ids, times and what ``mask`` matches; each number
    equal to the one shown at the digits shown (within one unit of the last),
    or within float32's rounding between CPUs (FLOAT32_RTOL)."""

    def split(text: str) -> tuple[str, list[str]]:
        text = re.sub(r"pooling-[0-9a-f]+", "pooling-ID", text)
        text = re.sub(r'("created_at":\s*)\d+', r"\1T", text)
        if mask is not None:
            text = mask.sub("M", text)
        return re.sub(r"\s+", "", _NUMBER.sub("N", text)), _NUMBER.findall(text)

    (got_text, got_numbers), (want_text, want_numbers) = split(got), split(want)
    same = (
        got_text == want_text
        and len(got_numbers) == len(want_numbers)
        and all(map(_same_at_shown_digits, got_numbers, want_numbers))
    )
    if not same and os.environ.get("UPDATE_DOCS") == "1":
        _update(where, want, got)
    assert got_text == want_text, f"{where} printed:\n{got}\nthe page shows:\n{want}"
    assert len(got_numbers) == len(want_numbers)
    for g, w in zip(got_numbers, want_numbers):
        assert _same_at_shown_digits(g, w), f"{where}: {g} is not {w} at its digits\n{got}"


# The model's numbers are float32 sums, whose last bits differ between CPUs (oneDNN's
# AVX2 and AVX-512/AMX kernels add in other orders): a number shown with more digits
# than float32 holds matches within the parity suite's relative tolerance.
FLOAT32_RTOL = Decimal("1e-5")


def _same_at_shown_digits(got: str, shown: str) -> bool:
    shown_d = Decimal(shown)
    unit = Decimal(1).scaleb(shown_d.as_tuple().exponent)  # one unit of the last digit shown
    return abs(Decimal(got) - shown_d) <= max(unit, FLOAT32_RTOL * abs(shown_d))


def _update(where: str, want: str, got: str) -> None:
    """Write ``got`` over the output block ``want`` of the block at ``where``."""
    name, line = where.rsplit(" line ", 1)
    page = ROOT / name
    text = page.read_text()
    start = len("".join(text.splitlines(True)[: int(line) - 1]))
    at = text.index(want, start)
    page.write_text(text[:at] + got + text[at + len(want) :])


def stdout_of(command: list[str], **kw: object) -> str:
    """What ``command``, run in the checkout, prints; it must succeed."""
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT, **kw)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def run_bash(code: str, ports: dict[int, int], **kw: object) -> str:
    for page_port, port in ports.items():
        code = code.replace(f"127.0.0.1:{page_port}", f"127.0.0.1:{port}")
    return stdout_of(["bash", "-c", code], **kw)


def _venv_env() -> dict[str, str]:
    """The environment of a shell whose venv is this one (``bge-m3-sparse`` on the PATH)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _ran(kind: str) -> list[Block]:
    return [b for b in BLOCKS if b.output is not None and _kind(b) == kind]


def _kind(block: Block) -> str:
    if quoted_example(block):
        return "example"
    if block.lang == "python":
        return "keyed" if "s3cret" in block.code else "python"
    if "bge-m3-sparse doctor" in block.code:
        return "doctor"
    if "$DATABASE_URL" in block.code:
        return "postgres"
    if runs_index(block):
        return "ray" if "--ray" in block.code else "index"
    if "examples/offline.py" in block.code:
        return "offline"
    if "s3cret" in block.code:
        return "keyed"
    return "server"


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("server"), ids=_id)
def test_curl_blocks_print_what_the_page_shows(block, server):
    got = run_bash(block.code, {8000: server.port})
    assert_same_output(got, block.output, block.where)


@pytest.mark.engine
@pytest.mark.parametrize("block", [b for b in BLOCKS if run_against_server(b)], ids=_id)
def test_blocks_run_beside_a_server_succeed(block, server):
    """Blocks with no output shown that use the reader's server: the examples'
    commands, the python snippets. They must run as written (the model name
    they send included) against a server started as the pages say."""
    if block.lang == "python":
        code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
        preamble = "from bge_m3_sparse_plugin.client import SparseEmbeddingClient\n"
        stdout_of([sys.executable, "-c", preamble + code])
    else:
        run_bash(block.code, {8000: server.port}, env=_venv_env())


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("example"), ids=_id)
def test_quoted_examples_print_what_the_page_shows(block, server):
    got = stdout_of([sys.executable, quoted_example(block), "--url", server.url])
    assert_same_output(got, block.output, block.where)


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("python"), ids=_id)
def test_python_blocks_print_what_the_page_shows(block, server):
    code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    assert_same_output(stdout_of([sys.executable, "-c", code]), block.output, block.where)


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("keyed"), ids=_id)
def test_api_key_blocks_print_what_the_page_shows(block, keyed_server):
    if block.lang == "bash":
        got = run_bash(block.code, {8000: keyed_server.port})
    else:
        code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{keyed_server.port}")
        got = stdout_of([sys.executable, "-c", code])
    assert_same_output(got, block.output, block.where)


def _with_model(code: str, model_dir: Path) -> str:
    """The block on the tests' model (built once per session), in this venv."""
    kept = [
        line
        for line in code.splitlines()
        if not line.startswith(("source .venv/bin/activate", "python -m bge_m3_sparse_plugin.tiny"))
    ]
    return "\n".join(kept).replace("models/bge-m3-tiny", str(model_dir))


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("offline"), ids=_id)
def test_the_offline_example_prints_what_the_page_shows(block, model_dir):
    got = stdout_of(["bash", "-c", _with_model(block.code, model_dir)], env=_venv_env())
    assert_same_output(got, block.output, block.where)


# The index command's timings and speeds: this machine's, not the page's.
_TIMINGS = re.compile(
    r"in [\d.]+ s( \(engine start [\d.]+ s\))?: [\d,.]+ documents/s, [\d,]+ tokens/s"
)


@pytest.mark.engine
@pytest.mark.parametrize("block", _ran("index"), ids=_id)
def test_index_blocks_print_what_the_page_shows(block, model_dir, tmp_path):
    """Run in a copy of the page's folders: its output folder is the block's own."""
    (tmp_path / "models").mkdir()
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    code = _with_model(block.code, model_dir)
    out = subprocess.run(
        ["bash", "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=_venv_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_output(out.stdout, block.output, block.where, mask=_TIMINGS)


# The reader's database, as the command names it (its password hidden), and the timings.
_DATABASE = re.compile(rf"{_TIMINGS.pattern}|postgres(ql)?://\S+")


@pytest.mark.engine
def test_postgres_blocks_print_what_the_page_shows(server, postgres, model_dir, tmp_path):
    """The blocks that use $DATABASE_URL, in page order, in one copy of the
    page's folders: the index command loads the table the search then reads,
    on a real PostgreSQL with pgvector and the tests' server."""
    blocks = _ran("postgres")
    assert len(blocks) >= 2  # the load, then the search
    (tmp_path / "models").mkdir()
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = _venv_env() | {"DATABASE_URL": postgres}
    for block in blocks:
        code = _with_model(block.code, model_dir).replace(
            "127.0.0.1:8000", f"127.0.0.1:{server.port}"
        )
        out = subprocess.run(
            ["bash", "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert_same_output(out.stdout, block.output, block.where, mask=_DATABASE)


# What the doctor says that depends on the machine: torch's version, the cores.
_MACHINE = re.compile(r"\d+")
# What the doctor's dtype finding says of this CPU (its instructions, hence the
# index command's choice, the reason and the fix): tests/test_precision.py
# checks it against this machine's flags.
_CPU_CHOICE = re.compile(
    r"(the index command's auto runs ).*$|(fix: vllm serve \.\.\. --dtype )\w+$", re.M
)


@pytest.mark.parametrize("block", _ran("doctor"), ids=_id)
def test_doctor_blocks_print_what_the_page_shows(block, model_dir):
    got = stdout_of(["bash", "-c", _with_model(block.code, model_dir)], env=_venv_env())
    got = got.replace(str(model_dir), "models/bge-m3-tiny")

    def machine(text: str) -> str:
        return _MACHINE.sub("N", _CPU_CHOICE.sub(r"\1\2CPU", text))

    assert machine(got) == machine(block.output), got


@pytest.mark.engine
def test_the_readme_request_is_the_examples_request(server):
    """The README's first output is what examples/online_curl.sh prints."""
    (first,) = [b for b in BLOCKS if b.page.name == "README.md" and b.output is not None][:1]
    got = stdout_of(["bash", "examples/online_curl.sh", server.url, "bge-m3-tiny"])
    assert_same_output(got, first.output, "examples/online_curl.sh")
