"""What the tests of the PostgreSQL sink read back (the server: conftest's fixture)."""

from __future__ import annotations


def rows_of(uri: str, table: str) -> dict[str, dict[int, float]]:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    with psycopg.connect(uri) as conn:
        register_vector(conn)
        query = sql.SQL("SELECT id, sparse FROM {}").format(sql.Identifier(table))
        found = conn.execute(query).fetchall()
    rows = {row_id: dict(zip(sparse.indices(), sparse.values())) for row_id, sparse in found}
    assert len(rows) == len(found)
    return rows
