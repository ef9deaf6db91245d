"""No secret of a sink's URI in what the index command prints or writes.

Every URI form docs/vector-stores.md accepts, each holding a canary secret,
against a sink that is not there: the canary, as written and percent-decoded,
is in neither the command's output nor any file under the output folder.
The run that loads a real PostgreSQL with a canary in its URI is in
tests/test_index_postgres.py (test_a_run_killed_while_the_index_builds...).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bge_m3_sparse_plugin.index._secrets import public_uri, secrets_of
from bge_m3_sparse_plugin.index._sinks import parse_sink

CANARY = "Canary%2F7q"  # percent-encoded: "Canary/7q" is what a driver sees
DECODED = "Canary/7q"

# (the --sink value, its public form), written out by hand.
FORMS = [
    (
        f"postgresql://loader:{CANARY}@127.0.0.1:1/db",
        "postgresql://loader:***@127.0.0.1:1/db",
    ),
    (f"postgres://loader:{CANARY}@127.0.0.1:1/db", "postgres://loader:***@127.0.0.1:1/db"),
    (
        f"postgresql://loader@127.0.0.1:1/db?password={CANARY}",
        "postgresql://loader@127.0.0.1:1/db?password=***",
    ),
    (
        f"postgresql://loader@/db?host=/nonexistent&password={CANARY}&sslmode=disable",
        "postgresql://loader@/db?host=/nonexistent&password=***&sslmode=disable",
    ),
    (
        f"postgresql://loader:{CANARY}@[::1]:1,127.0.0.1:1/db?connect_timeout=5",
        "postgresql://loader:***@[::1]:1,127.0.0.1:1/db?connect_timeout=5",
    ),
    (f"milvus:http://root:{CANARY}@127.0.0.1:1", "milvus:http://root:***@127.0.0.1:1"),
    (f"milvus:https://root:{CANARY}@127.0.0.1:1", "milvus:https://root:***@127.0.0.1:1"),
    (f"milvus:http://127.0.0.1:1?token={CANARY}", "milvus:http://127.0.0.1:1?token=***"),
    (f"qdrant:http://user:{CANARY}@127.0.0.1:1", "qdrant:http://user:***@127.0.0.1:1"),
    (
        f"qdrant:https://127.0.0.1:1/?api_key={CANARY}&timeout=5",
        "qdrant:https://127.0.0.1:1/?api_key=***&timeout=5",
    ),
]


@pytest.mark.parametrize("uri,public", FORMS)
def test_the_public_form_of_each_uri_hides_its_secret(uri, public):
    spec = parse_sink(uri, "docs")
    shown = spec.describe()
    assert shown.startswith(public + " (")
    assert CANARY not in shown and DECODED not in shown
    assert set(secrets_of(spec.target)) == {CANARY, DECODED}


def test_a_drivers_message_is_scrubbed_of_the_secret_in_either_form():
    spec = parse_sink(f"postgresql://u:{CANARY}@h/db", "docs")
    said = f"could not use '{DECODED}' nor {CANARY} for u"
    assert spec.scrub(said) == "could not use '***' nor *** for u"


@pytest.mark.parametrize(
    "target",
    [
        "postgresql://loader@/db?host=/tmp/pg&port=5432&sslmode=require",
        "/data/milvus.db",
        "http://127.0.0.1:6333",
        "https://user@host:19530",
    ],
)
def test_what_is_not_a_secret_is_left_as_it_is(target):
    assert public_uri(target) == target
    assert secrets_of(target) == []


def test_an_empty_password_is_hidden_too():
    """Whether a URI has a password is not shown either (pgserver's URIs have an empty one)."""
    uri = "postgresql://postgres:@/postgres?host=/tmp/pg"
    assert public_uri(uri) == "postgresql://postgres:***@/postgres?host=/tmp/pg"
    assert secrets_of(uri) == []


def _every_file(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("uri,public", FORMS)
def test_no_secret_in_the_commands_output_or_files_when_the_sink_is_down(
    uri, public, model_dir, tmp_path
):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "a text"}\n')
    out = tmp_path / "vectors"
    # The sink as given, then under a kind the command does not know (its
    # refusal quotes the value).
    said = []
    for sink in (uri, "pinecone:" + uri.split(":", 1)[1]):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bge_m3_sparse_plugin",
                "index",
                str(corpus),
                str(out),
                "--model",
                str(model_dir),
                "--sink",
                sink,
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode in (1, 2), done.stderr[-2000:]
        said.append(done.stdout + done.stderr)
    assert f"--sink {public} (" in said[0], said[0][-2000:]
    assert "pinecone:" in said[1] and "***" in said[1], said[1][-2000:]
    assert not out.exists()  # neither a refused sink nor one that is down makes OUTPUT
    for secret in (CANARY, DECODED):
        assert not [text for text in said if secret in text]
        assert not [path for path, body in _every_file(out).items() if secret.encode() in body]
