"""A mistyped --model fails in one line, before any engine starts or OUTPUT is made.

A name that can only be a path is a missing folder; a name that may be a hub
id is looked for in the Hugging Face cache, then asked of the hub. The hub is
not reachable from these machines, so a small HTTP server stands in for it
where the hub's answer matters (it answers as huggingface.co's API does: 404
with ``X-Error-Code: RepoNotFound``, or the model's JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bge_m3_sparse_plugin._model_location import locate_model

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample_corpus.jsonl"
KNOWN = "some-org/known-model"


class _Hub(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.split("?")[0] == f"/api/models/{KNOWN}":
            body = json.dumps({"id": KNOWN, "modelId": KNOWN, "sha": "0" * 40}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = json.dumps({"error": "Repository not found"}).encode()
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _command(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    # An empty cache of its own, and the hub's variables only as the test sets them.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    environ.update(HF_HOME=str(cwd / "hf-home"), **env)
    return subprocess.run(
        [sys.executable, "-m", "bge_m3_sparse_plugin", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


@pytest.mark.parametrize(
    "model,why",
    [
        ("models/bge-m3-tyni", "models/ is a folder here"),
        ("./models/bge-m3-tyni", "it starts with '.'"),
        ("/no/such/model", "it starts with '/'"),
        ("~/models/bge-m3", "it starts with '~'"),
        ("a/b/c", "a hub id has at most one '/' (ORG/NAME)"),
    ],
)
def test_a_name_that_can_only_be_a_path_is_a_missing_folder(model, why, tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    where = locate_model(model)
    assert where.problem == f"{model}: no such folder (a path, not a model hub id: {why})"
    assert (where.folder, where.hub_id) == (None, None)


def test_a_folder_is_a_folder(tmp_path, monkeypatch):
    (tmp_path / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert locate_model("models/m").folder == Path("models/m")


def _index(cwd: Path, model: str, **env: str) -> list[str]:
    """What the index command says on stderr for ``--model MODEL``; it must
    refuse (exit 2) and print nothing else, and make no OUTPUT."""
    out = cwd / "models" / "vectors-x"
    done = _command(cwd, "index", str(SAMPLE), str(out), "--model", model, "--no-progress", **env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    assert not out.exists()
    return done.stderr.splitlines()


def test_the_index_command_says_so_in_one_line_and_makes_no_output(tmp_path):
    (tmp_path / "models").mkdir()
    assert _index(tmp_path, "models/bge-m3-tyni") == [
        "bge-m3-sparse index: --model models/bge-m3-tyni: no such folder (a path, not a model "
        "hub id: models/ is a folder here)"
    ]


def test_a_possible_hub_id_the_hub_lacks_names_both_readings(tmp_path, hub):
    assert _index(tmp_path, "BAAI/bge-m3x", HF_ENDPOINT=hub) == [
        f"bge-m3-sparse index: --model BAAI/bge-m3x: no such folder here, and the model hub "
        f"({hub}) has no model of that name"
    ]


def test_a_hub_that_cannot_be_reached_is_said_in_one_line(tmp_path):
    (line,) = _index(tmp_path, "BAAI/bge-m3", HF_ENDPOINT="http://127.0.0.1:1")
    assert line.startswith(
        "bge-m3-sparse index: --model BAAI/bge-m3: no such folder here, and the model hub "
        "(http://127.0.0.1:1) cannot be reached (ConnectError: "
    )


def test_offline_a_hub_id_must_be_in_the_cache(tmp_path):
    assert _index(tmp_path, "BAAI/bge-m3", HF_HUB_OFFLINE="1") == [
        "bge-m3-sparse index: --model BAAI/bge-m3: no such folder here, and not in the Hugging "
        "Face cache (HF_HUB_OFFLINE is set, so the model hub is not asked)"
    ]


def test_a_hub_id_the_hub_has_is_left_to_vllm_to_download(hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    where = locate_model(KNOWN)
    assert (where.folder, where.hub_id, where.problem) == (None, KNOWN, None)


def test_doctor_reports_a_missing_folder_and_an_unknown_hub_id_as_problems(tmp_path, hub):
    (tmp_path / "models").mkdir()
    for model, said in [
        (
            "models/bge-m3-tyni",
            "models/bge-m3-tyni: no such folder (a path, not a model hub id: models/ is a "
            "folder here)",
        ),
        (
            "BAAI/bge-m3x",
            f"BAAI/bge-m3x: no such folder here, and the model hub ({hub}) has no model of "
            "that name",
        ),
    ]:
        done = _command(tmp_path, "doctor", model, HF_ENDPOINT=hub)
        assert done.returncode == 1, done.stdout
        assert f"PROBLEM  {said}" in done.stdout
        assert "hf download" not in done.stdout
        lines = done.stdout.splitlines()
        fix = lines[lines.index(f"  PROBLEM  {said}") + 1]
        assert fix.strip() == (
            "fix: ls models   (the folders there; give the model's as it is on disk)"
            if model.startswith("models/")
            else "fix: give a model folder, or a hub id the hub has (https://huggingface.co/models)"
        )
        assert done.stdout.splitlines()[-1] == "1 problem(s)"
