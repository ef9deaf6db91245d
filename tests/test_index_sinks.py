"""The index command's sinks: a real embedded Milvus Lite and a real Qdrant local mode.

The vectors are those `bge-m3-sparse index` wrote in tests/test_index.py
(equal to FlagEmbedding's, as that file checks), loaded shard by shard as the
command loads them; one run of the command itself checks the wiring.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from bge_m3_sparse_plugin._scores import lexical_matching_score
from bge_m3_sparse_plugin.index._output import ShardRows
from bge_m3_sparse_plugin.index._sinks import (
    DENSE_FIELD,
    SPARSE_FIELD,
    SinkSpec,
    open_sink,
    parse_sink,
)

from .support.corpus import shard_rows

pytestmark = pytest.mark.engine

KINDS = ["milvus-lite", "qdrant"]


def count(kind: str, sink) -> int:
    if kind == "qdrant":
        return sink.client.count(sink.collection, exact=True).count
    return sink.client.query(sink.collection, filter="", output_fields=["count(*)"])[0]["count(*)"]


def sparse_search(
    kind: str, sink, indices: list[int], values: list[float], limit: int
) -> list[str]:
    if kind == "qdrant":
        from qdrant_client import models

        hits = sink.client.query_points(
            sink.collection,
            query=models.SparseVector(indices=indices, values=values),
            using=SPARSE_FIELD,
            limit=limit,
            with_payload=True,
        ).points
        return [hit.payload["id"] for hit in hits]
    hits = sink.client.search(
        sink.collection,
        data=[dict(zip(indices, values))],
        anns_field=SPARSE_FIELD,
        limit=limit,
        search_params={"metric_type": "IP"},
        output_fields=["id"],
    )[0]
    return [hit["id"] for hit in hits]


@pytest.fixture(params=KINDS)
def loaded(request, first_run, tmp_path):
    """Every shard loaded, then the first one again: as a run killed after
    loading a shard and before recording it, then resumed, does."""
    kind = request.param
    out, _ = first_run
    target = tmp_path / ("milvus.db" if kind == "milvus-lite" else "qdrant")
    sink = open_sink(SinkSpec(kind, str(target), "docs"), dense_size=None)
    rows = shard_rows(out)
    for shard in rows:
        sink.upsert(shard)
    sink.upsert(rows[0])
    yield kind, sink, rows
    sink.close()


def test_a_shard_loaded_twice_leaves_each_point_once(loaded):
    kind, sink, rows = loaded
    ids = {rid for shard in rows for rid in shard.ids}
    with_weights = {rid for shard in rows for rid, ind in zip(shard.ids, shard.indices) if ind}
    assert len(ids) == sum(len(shard.ids) for shard in rows) > len(with_weights)
    # Every row, those whose sparse vector is empty too (Milvus refuses an
    # empty one: the sink stores a weight at an index no query holds).
    assert count(kind, sink) == len(ids)


def test_a_documents_own_vector_finds_it_first(loaded):
    kind, sink, rows = loaded
    docs = {
        rid: {"indices": i, "values": v}
        for s in rows
        for rid, i, v in zip(s.ids, s.indices, s.values)
        if i
    }
    # Queries whose own document is, by the lexical score computed here, the best match.
    queries = [
        rid
        for rid in sorted(docs)[::17]
        if max(docs, key=lambda d: lexical_matching_score(docs[rid], docs[d])) == rid
    ][:6]
    assert len(queries) >= 4
    for rid in queries:
        assert sparse_search(kind, sink, docs[rid]["indices"], docs[rid]["values"], 3)[0] == rid


def test_milvus_keeps_a_row_whose_sparse_vector_is_empty_with_its_dense_vector(tmp_path):
    """Found by its dense vector, and by no sparse query: as an empty vector scores."""
    sink = open_sink(SinkSpec("milvus-lite", str(tmp_path / "m.db"), "docs"), dense_size=2)
    try:
        sink.upsert(
            ShardRows(
                ids=["empty", "words"],
                indices=[[], [3, 7]],
                values=[[], [0.5, 0.25]],
                num_tokens=[3, 4],
                dense=[[1.0, 0.0], [0.0, 1.0]],
            )
        )
        assert count("milvus-lite", sink) == 2
        dense_hits = sink.client.search(
            "docs", data=[[1.0, 0.0]], anns_field=DENSE_FIELD, limit=1, output_fields=["id"]
        )[0]
        assert [hit["id"] for hit in dense_hits] == ["empty"]
        # A query's tokens are ids of bge-m3's vocabulary (250,002 of them).
        query = [0, 3, 7, 1000, 250_001]
        assert sparse_search("milvus-lite", sink, query, [1.0] * len(query), 5) == ["words"]
    finally:
        sink.close()


def test_an_empty_corpus_opens_and_finishes_its_sink_without_an_engine(model_dir, tmp_path):
    """No row: no engine starts, the sink is opened and finished once, and
    the run says only where it loaded (no earlier run to have finished)."""
    corpus = tmp_path / "empty.jsonl"
    corpus.write_text("")
    db, out = tmp_path / "m.db", tmp_path / "vectors"
    cmd = [
        sys.executable, "-m", "bge_m3_sparse_plugin", "index", str(corpus), str(out),
        "--model", str(model_dir), "--sink", f"milvus-lite:{db}", "--no-progress",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        done.stdout.splitlines()[-1] == f"loaded into milvus-lite:{db} (collection 'bge_m3_sparse')"
    )
    assert "starting vLLM's engine" not in done.stderr
    assert json.loads((out / "_manifest.json").read_text())["sink_finished"] is True


def test_sink_spec_is_checked():
    assert parse_sink("qdrant:http://127.0.0.1:6333", "c") == SinkSpec(
        "qdrant", "http://127.0.0.1:6333", "c"
    )
    with pytest.raises(ValueError, match="give milvus-lite:PATH, milvus:URI, qdrant:PATH"):
        parse_sink("pinecone:x", "c")
    # --sink "$DATABASE_URL" with the variable unset: the message names that case.
    with pytest.raises(ValueError) as empty:
        parse_sink("", "c")
    assert str(empty.value).startswith(
        "--sink '' is empty: if you gave a variable (--sink \"$DATABASE_URL\"), it is not set "
        "in this shell."
    )


@pytest.mark.parametrize("name", ["order", "user", "select", "Table", "t" * 51, "ü" * 25])
def test_a_postgres_table_name_is_taken_when_postgresql_keeps_it_whole(name):
    """Reserved words too (the sink quotes every name); at most 63 bytes with
    the index's suffix, '_sparse_hnsw' (12 bytes)."""
    assert parse_sink("postgresql://u@h/db", name).collection == name.lower()


@pytest.mark.parametrize(
    "name,says",
    [
        ("t" * 52, "52 bytes; PostgreSQL cuts names at 63 bytes"),
        ("ü" * 26, "52 bytes; PostgreSQL cuts names at 63 bytes"),
        ("1st", "letters, digits and underscores"),
        ("a-b", "letters, digits and underscores"),
        ('a"; DROP TABLE x; --', "letters, digits and underscores"),
    ],
)
def test_a_postgres_table_name_postgresql_would_cut_or_misread_is_refused(name, says):
    with pytest.raises(ValueError, match=says):
        parse_sink("postgresql://u@h/db", name)


def test_the_command_loads_qdrant_with_dense(model_dir, corpus, tmp_path):
    out, db = tmp_path / "vectors", tmp_path / "qdrant"
    cmd = [
        sys.executable,
        "-m",
        "bge_m3_sparse_plugin",
        "index",
        str(corpus["folder"] / "b.parquet"),
        str(out),
        "--model",
        str(model_dir),
        "--dtype",
        "float32",
        "--rows-per-shard",
        "40",
        "--dense",
        "--sink",
        f"qdrant:{db}",
        "--collection",
        "docs",
        "--no-progress",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"loaded into qdrant:{db} (collection 'docs')" in result.stdout
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["job"]["sink"] == f"qdrant:{db} (collection 'docs')"
    table = pq.read_table(out).to_pydict()
    assert len(table["dense"][0]) == 128  # the small model's hidden size
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(db))
    try:
        points = client.scroll("docs", limit=1000, with_vectors=True, with_payload=True)[0]
        stored = {p.payload["id"]: p.vector for p in points}
        assert sorted(stored) == sorted(table["id"])
        for rid, indices, values, dense in zip(
            table["id"], table["indices"], table["values"], table["dense"]
        ):
            sparse = stored[rid]["sparse"]
            assert dict(zip(sparse.indices, sparse.values)) == pytest.approx(
                dict(zip(indices, values))
            )
            assert stored[rid]["dense"] == pytest.approx(dense, rel=1e-6)
    finally:
        client.close()
