"""scripts/test.sh's phases: each runs whatever the others did, and a summary ends it.

The phase runner (scripts/phases.sh) is run by bash on phases of the test's
own: one that fails in the middle must not hide the ones after it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/phases.sh; {script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_failed_phase_does_not_stop_the_rest_and_the_summary_says_so(tmp_path):
    done = tmp_path / "done"
    result = _run(
        "phase first true; "
        "phase second bash -c 'echo the second says why >&2; exit 3'; "
        f"phase third touch {done}; "
        "skip fourth 'tests named'; "
        "summary"
    )
    assert result.returncode == 1
    assert done.exists()  # the third ran after the second failed
    lines = result.stderr.splitlines()
    assert "the second says why" in lines
    summary = lines[lines.index("== summary") + 1 :]
    assert [line.split(" (")[0] for line in summary] == [
        "  passed  first",
        "  FAILED  second",
        "  passed  third",
        "  skipped fourth",
        "some phases FAILED: read their output above",
    ]
    assert "(exit 3, " in summary[1]
    assert summary[3] == "  skipped fourth (tests named)"


def test_every_phase_passed_exits_0():
    result = _run("phase one true; phase two true; summary")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "every phase passed"


def test_the_test_command_runs_its_phases_through_the_runner():
    """scripts/test.sh names each phase through ``phase`` and ends with ``summary``."""
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert "source scripts/phases.sh" in script
    commands = [line.strip() for line in script.splitlines() if not line.lstrip().startswith("#")]
    runs = [c for c in commands if c.startswith((".venv/bin/", "bash scripts/test_"))]
    assert runs == []  # every command is a phase's
    assert commands[-1] == "summary"
    for name in (
        "ruff check",
        "ruff format",
        "mypy",
        "pytest",
        "Ray 2.50",
        "vLLM 0.33 and 0.34",
        "the wheel",
    ):
        assert f'phase "{name}" ' in script
