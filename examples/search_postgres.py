"""Hybrid search, in SQL, of what `bge-m3-sparse index --dense --sink postgresql://...`
loaded, with a query embedded by a running server.

    python examples/search_postgres.py --url http://127.0.0.1:8000 \
        --db postgresql://USER@HOST/DB --corpus examples/sample_corpus.jsonl "a query"

The candidates are the best by each vector (each an ``ORDER BY ... LIMIT``,
which pgvector's HNSW indexes serve when the table has them); their hybrid
score is BGE-M3's ``dense + 0.3 * sparse`` (``--weights``), both computed in
the database: ``<#>`` is pgvector's negative inner product.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import psycopg
from pgvector import SparseVector
from pgvector.psycopg import register_vector
from psycopg import sql

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

HYBRID = """
WITH candidates AS (
    (SELECT id FROM {table} ORDER BY sparse <#> %(sparse)s LIMIT %(candidates)s)
    UNION
    (SELECT id FROM {table} ORDER BY dense <#> %(dense)s LIMIT %(candidates)s)
), scored AS (
    SELECT id, -(sparse <#> %(sparse)s) AS sparse, -(dense <#> %(dense)s) AS dense
    FROM {table} JOIN candidates USING (id)
)
SELECT id, sparse, dense, %(w_dense)s * dense + %(w_sparse)s * sparse AS hybrid
FROM scored ORDER BY hybrid DESC, id LIMIT %(top)s
"""


def search(
    conn: psycopg.Connection,
    table: str,
    sparse: SparseVector,
    dense: np.ndarray,
    weights: tuple[float, float] = (1.0, 0.3),
    top: int = 3,
    candidates: int = 50,
) -> list[tuple[str, float, float, float]]:
    """(id, sparse score, dense score, hybrid score), best first."""
    query = sql.SQL(HYBRID).format(table=sql.Identifier(table))
    params = {
        "sparse": sparse,
        "dense": dense,
        "w_dense": weights[0],
        "w_sparse": weights[1],
        "top": top,
        "candidates": candidates,
    }
    return [tuple(row) for row in conn.execute(query, params).fetchall()]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--db", required=True, help="the URI given to --sink")
    parser.add_argument("--table", default="bge_m3_sparse", help="the --collection")
    parser.add_argument("--corpus", help="the indexed JSONL, to print the hits' texts")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument(
        "--weights", type=float, nargs=2, default=(1.0, 0.3), metavar=("DENSE", "SPARSE")
    )
    args = parser.parse_args()

    with psycopg.connect(args.db) as conn:
        register_vector(conn)
        vocab = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attname = 'sparse'",
            (args.table,),
        ).fetchone()
        if vocab is None:
            raise SystemExit(f"no table {args.table!r} with a sparse column in {args.db}")
        with SparseEmbeddingClient(args.url) as client:
            item = client.embed(args.query, sparse_format="indices_values", return_dense=True).data[
                0
            ]
        weights = item.sparse_embedding
        sparse = SparseVector(dict(zip(weights["indices"], weights["values"])), vocab[0])
        dense = np.asarray(item.dense_embedding, dtype=np.float32)
        hits = search(conn, args.table, sparse, dense, tuple(args.weights), args.top)
    texts = {}
    if args.corpus:
        with open(args.corpus) as f:
            texts = {row["id"]: row["text"] for row in map(json.loads, f)}
    print(f"query: {args.query!r}")
    print("   hybrid   sparse    dense  id")
    for doc_id, sparse_score, dense_score, hybrid in hits:
        text = texts.get(doc_id, "")[:60]
        print(
            f"  {hybrid:7.4f}  {sparse_score:7.4f}  {dense_score:7.4f}  {doc_id}  {text}".rstrip()
        )


if __name__ == "__main__":
    main()
