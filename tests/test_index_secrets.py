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
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from bge_m3_sparse_plugin.index._secrets import shown
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
    # libpq reads a ? in the user info as part of the password (user loader,
    # password Canary%2F7q?x): it is hidden whole.
    (
        f"postgresql://loader:{CANARY}?x@127.0.0.1:1/db",
        "postgresql://loader:***@127.0.0.1:1/db",
    ),
    # A libpq keyword/value string, shown as libpq writes what it read.
    (
        f"host=127.0.0.1 port=1 dbname=db user=loader password={CANARY}",
        "user=loader password=*** dbname=db host=127.0.0.1 port=1",
    ),
    (
        f"host=127.0.0.1 port=1 dbname=db user=loader sslpassword='{DECODED} 2' password={CANARY}",
        "user=loader password=*** dbname=db host=127.0.0.1 port=1 sslpassword=***",
    ),
    (f"milvus:http://root:{CANARY}@127.0.0.1:1", "milvus:http://root:***@127.0.0.1:1"),
    (f"milvus:http://root:{CANARY}?x@127.0.0.1:1", "milvus:http://root:***@127.0.0.1:1"),
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
    try:
        spec = parse_sink(uri, "docs")
    except ValueError as refused:  # a form its client misreads: refused, hidden too
        shown = str(refused).removeprefix("--sink ")
    else:
        shown = spec.describe()
        assert all(any(c in s for s in spec.secrets()) for c in (CANARY, DECODED))
    assert shown.startswith(public + " (")
    assert CANARY not in shown and DECODED not in shown and "?x" not in shown


def test_a_drivers_message_is_scrubbed_of_the_secret_in_either_form():
    spec = parse_sink(f"postgresql://u:{CANARY}@h/db", "docs")
    said = f"could not use '{DECODED}' nor {CANARY} for u"
    assert spec.scrub(said) == "could not use '***' nor *** for u"


@pytest.mark.parametrize(
    "target,postgres",
    [
        ("postgresql://loader@/db?host=/tmp/pg&port=5432&sslmode=require", True),
        ("/data/milvus.db", False),
        ("http://127.0.0.1:6333", False),
        ("https://user@host:19530", False),
        ("http://h:1/x?email=a@b", False),
    ],
)
def test_what_is_not_a_secret_is_left_as_it_is(target, postgres):
    assert shown(target, postgres) == type(shown(target, postgres))(target, ())


def test_an_empty_password_is_hidden_too():
    """Whether a URI has a password is not shown either (pgserver's URIs have an empty one)."""
    uri = "postgresql://postgres:@/postgres?host=/tmp/pg"
    assert shown(uri, postgres=True).public == "postgresql://postgres:***@/postgres?host=/tmp/pg"
    assert shown(uri, postgres=True).secrets == ()


def test_a_string_libpq_cannot_read_is_refused_without_quoting_it():
    """libpq's own message quotes the token it stopped at, which may be the
    password; the refusal quotes nothing of the value."""
    for text in (f"host=h password = {DECODED} 2", f"postgresql://u:{CANARY}%zz@h/db"):
        with pytest.raises(ValueError) as refused:
            parse_sink(text, "docs")
        assert "not shown" in str(refused.value)
        assert CANARY not in str(refused.value) and DECODED not in str(refused.value)
        assert "2" not in str(refused.value) and "zz" not in str(refused.value)


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
    for sink in (uri, "pinecone:" + (uri.split(":", 1)[1] if "://" in uri else uri)):
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
    if "://" in uri:
        assert "pinecone:" in said[1] and "***" in said[1], said[1][-2000:]
    else:  # not a URI, and libpq cannot read it: not quoted at all
        assert "--sink (not shown: it may hold a password)" in said[1], said[1][-2000:]
    assert not out.exists()  # neither a refused sink nor one that is down makes OUTPUT
    for secret in (CANARY, DECODED):
        assert not [text for text in said if secret in text]
        assert not [path for path, body in _every_file(out).items() if secret.encode() in body]


# -- libpq's grammar, drawn: whatever libpq reads as a secret is never shown ----

# Secrets start with a marker no other drawn part holds, so that finding one in
# the output cannot be a coincidence; after it, any printable ASCII, the
# characters that URIs and keyword strings treat specially included.
MARK = "Q~"
SECRET_TAIL = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=2)
SECRET = SECRET_TAIL.map(lambda tail: MARK + tail)
NAME = st.text(alphabet="abcdefghijklmnop_", min_size=1, max_size=8)
HOST = st.sampled_from(["127.0.0.1", "localhost", "db.internal", "[::1]", "/tmp/pg"])
EXTRA = st.dictionaries(
    st.sampled_from(["sslmode", "connect_timeout", "application_name"]),
    st.sampled_from(["disable", "5", "loader"]),
    max_size=2,
)


def _encode(text: str, must: str, draw_bit) -> str:
    """``text`` percent-encoded: each character of ``must``, and any other
    where the draw says so."""
    return (
        "".join(quote(ch, safe="") if ch in must or draw_bit() else ch for ch in text)
        if text
        else text
    )


@st.composite
def libpq_targets(draw):
    """(a target libpq reads, the secrets it holds): a URI with the password
    in its user info or its query, or a keyword/value string, each with an
    sslpassword perhaps."""
    user, db, host = draw(NAME), draw(NAME), draw(HOST)
    password = draw(SECRET)
    ssl = draw(st.none() | SECRET)
    extra = draw(EXTRA)
    form = draw(st.sampled_from(["userinfo", "query", "keywords"]))
    bit = lambda: draw(st.booleans())  # noqa: E731
    if form == "keywords":

        def value(v: str) -> str:
            return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"

        params = {"host": host, "dbname": db, "user": user, "password": password, **extra}
        if ssl is not None:
            params["sslpassword"] = ssl
        items = list(params.items())
        items = draw(st.permutations(items))
        target = " ".join(
            f"{k} = {value(v)}"
            if k in ("password", "sslpassword") or draw(st.booleans())
            else f"{k}={v}"
            for k, v in items
        )
        return target, [p for p in (password, ssl) if p]
    query = {**extra}
    netloc = host if not host.startswith("/") else ""
    if host.startswith("/"):
        query["host"] = host
    if form == "query":
        query["password"] = password
        userinfo = user
    else:
        # In the user info libpq ends the password at the first @, and its look
        # ahead at the first /: both must be encoded; % always is.
        userinfo = f"{user}:{_encode(password, '@/% ', bit)}"
    if ssl is not None:
        query["sslpassword"] = ssl
    pairs = draw(st.permutations(list(query.items())))
    text = "&".join(f"{k}={_encode(v, '&=%# ', bit)}" for k, v in pairs)
    scheme = draw(st.sampled_from(["postgresql://", "postgres://"]))
    target = f"{scheme}{userinfo}@{netloc}/{db}" + (f"?{text}" if text else "")
    return target, [p for p in (password, ssl) if p]


@settings(max_examples=300, deadline=None)
@given(libpq_targets())
def test_what_libpq_reads_as_a_secret_is_never_shown(drawn):
    target, _ = drawn
    params = conninfo_to_dict(target)  # libpq's reading is the oracle
    secrets = [str(params[k]) for k in ("password", "sslpassword") if params.get(k)]
    assert secrets and all(MARK in s for s in secrets)  # the drawing gave some
    spec = parse_sink(target, "docs")
    said = [
        spec.describe(),
        # what a driver might say, scrubbed: each secret as libpq read it,
        # and a URI as written (pymilvus quotes its URI in a refusal)
        spec.scrub(" ".join(secrets) + (" " + target if "://" in target else "")),
    ]
    for text in said:
        assert MARK not in text, (target, text)
    # and the public form is the same connection, the secrets aside
    public = conninfo_to_dict(spec.shown.public)
    assert {k: v for k, v in public.items() if k not in ("password", "sslpassword")} == {
        k: v for k, v in params.items() if k not in ("password", "sslpassword")
    }
