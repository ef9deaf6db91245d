"""examples/hybrid_search_milvus.py on a real server and a real Milvus Lite."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient, lexical_matching_score

pytestmark = pytest.mark.engine

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hybrid_search_milvus.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("hybrid_search_milvus", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_example_runs_from_its_command(server, tmp_path, example):
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--url", server.url, "--db", str(tmp_path / "demo.db")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{len(example.CORPUS)} docs in Milvus Lite")
    assert [line for line in lines if line.startswith("query: ")] == [
        f"query: {q}" for q in example.QUERIES
    ]
    for kind in ("sparse", "dense", "hybrid"):
        assert sum(line.startswith(f"  {kind} ") for line in lines) == len(example.QUERIES)


def test_milvus_sparse_ranking_equals_the_lexical_matching_score(server, tmp_path, example):
    from pymilvus import MilvusClient

    queries = [*example.QUERIES, *example.CORPUS[:4]]
    with SparseEmbeddingClient(server.url) as client:
        docs = example.embed(client, example.CORPUS)
        embedded_queries = example.embed(client, queries)
    milvus = MilvusClient(str(tmp_path / "ranking.db"))
    try:
        example.build_collection(milvus, example.CORPUS, docs)
        for q, query in enumerate(embedded_queries.sparse):
            local = [lexical_matching_score(query, doc) for doc in docs.sparse]
            hits = example.sparse_search(milvus, query, limit=len(example.CORPUS))
            matching = {i for i, score in enumerate(local) if score > 0}
            assert len(matching) >= 3, queries[q]  # a ranking worth comparing
            assert {doc_id for doc_id, _, _ in hits} >= matching, queries[q]
            for doc_id, score, text in hits:
                assert text == example.CORPUS[doc_id]
                # Milvus computes in float32.
                assert score == pytest.approx(local[doc_id], rel=1e-5, abs=1e-6), queries[q]
            # The same order as the local scores, up to ties within float32 noise.
            ranked = [local[doc_id] for doc_id, _, _ in hits]
            for better, worse in itertools.pairwise(ranked):
                assert better >= worse - 1e-5 * max(abs(better), 1.0), (queries[q], ranked)
            assert sorted(ranked, reverse=True) == pytest.approx(
                sorted(local, reverse=True)[: len(ranked)], rel=1e-5, abs=1e-6
            )
    finally:
        milvus.close()
