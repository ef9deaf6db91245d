"""Load each finished shard into a vector database too: Milvus, Qdrant or PostgreSQL.

``--sink milvus-lite:PATH`` and ``--sink qdrant:PATH`` run the database
in-process (Milvus Lite, ``QdrantClient(path=...)``); ``--sink milvus:URI``
and ``--sink qdrant:URL`` point at a server. The upsert is keyed on the row's
id, so a shard loaded twice (a run killed after loading it, before recording
it) leaves each point once.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .._config import QDRANT_API_KEY_ENV
from .._exceptions import SinkError, TableMismatch
from ._output import ShardRows
from ._secrets import Shown, UnreadableTarget, postgres_params, scrub, shown

__all__ = [
    "DENSE_FIELD",
    "SPARSE_FIELD",
    "Sink",
    "SinkSpec",
    "milvus_connection",
    "notes",
    "open_reporting_sink",
    "open_sink",
    "parse_sink",
    "qdrant_connection",
    "qdrant_point_id",
    "sparse_hnsw",
]

SPARSE_FIELD = "sparse"
DENSE_FIELD = "dense"
KINDS = ("milvus-lite", "milvus", "qdrant")
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# pgvector's HNSW index takes sparse vectors of at most this many non-zeros.
HNSW_MAX_NONZEROS = 1000
# PostgreSQL keeps the first NAMEDATALEN - 1 bytes of a name, silently.
POSTGRES_MAX_NAME_BYTES = 63
# The sparse index's name: the table's and this.
HNSW_SUFFIX = "_sparse_hnsw"
# Milvus refuses a sparse vector without a non-zero weight. A row whose
# vector is empty (every token under --min-weight) is stored with this one
# weight, the smallest normal float32, at an index past any vocabulary
# (Milvus takes indices below 2**32 - 1): no query holds that index, so it
# scores 0 against every query, as the empty vector does.
MILVUS_EMPTY_SPARSE = {2**32 - 2: 1.1754943508222875e-38}
# Qdrant takes unsigned integers or UUIDs as point ids: a row's id maps to a
# UUID, the same in every run, and is kept in the payload as "id".
_QDRANT_NAMESPACE = uuid.UUID("6b7c1d0e-6a3f-4a58-9d6e-0b6d3c7e5a10")


# The query parameters of --sink qdrant:URL and milvus:URI, each an argument
# of the client (which drops a URL's query silently: one not here is refused).
QDRANT_URL_PARAMETERS = ("api_key", "timeout")
MILVUS_URI_PARAMETERS = ("token",)


def qdrant_point_id(row_id: str) -> str:
    return str(uuid.uuid5(_QDRANT_NAMESPACE, row_id))


@dataclass(frozen=True)
class SinkSpec:
    kind: str  # postgresql, milvus-lite, milvus, qdrant
    target: str  # a path, a URI, a URL or a libpq keyword/value string
    collection: str

    @property
    def shown(self) -> Shown:
        return shown(self.target, postgres=self.kind == "postgresql")

    def describe(self) -> str:
        """The sink as the command prints and records it: never a secret."""
        if self.kind == "postgresql":
            return f"{self.shown.public} (table {self.collection!r})"
        return f"{self.kind}:{self.shown.public} (collection {self.collection!r})"

    def secrets(self) -> list[str]:
        found = list(self.shown.secrets)
        if self.kind == "qdrant" and os.environ.get(QDRANT_API_KEY_ENV):
            found.append(os.environ[QDRANT_API_KEY_ENV])
        return found

    def scrub(self, text: str) -> str:
        """``text`` (a driver's message) without the secrets of the target."""
        return scrub(text, self.secrets())

    def reason(self, exc: BaseException) -> str:
        """What went wrong, as a message may say it: the exception's type and
        first line, without the secrets of the target."""
        return self.scrub(_reason(exc))


KINDS_HELP = (
    "give milvus-lite:PATH, milvus:URI, qdrant:PATH (embedded), qdrant:URL (a server), "
    "postgresql://USER@HOST:PORT/DB or a libpq keyword/value string (host=... dbname=...)"
)


def parse_sink(text: str, collection: str) -> SinkSpec:
    """The sink ``--sink`` names, or a ValueError that shows none of its
    secrets: a PostgreSQL target is read by libpq (a URI or a keyword/value
    string), and one libpq cannot read is not quoted at all."""
    if not text.strip():
        raise ValueError(
            f'--sink {text!r} is empty: if you gave a variable (--sink "$DATABASE_URL"), '
            f"it is not set in this shell. {KINDS_HELP[0].upper()}{KINDS_HELP[1:]}"
        )
    kind, sep, target = text.partition(":")
    if sep and kind in KINDS and target:
        spec = SinkSpec(kind, target, collection)
        if kind == "qdrant":
            qdrant_connection(spec)  # its refusals, before anything starts
        if kind == "milvus":
            milvus_connection(spec)
        return spec
    if text.startswith(POSTGRES_SCHEMES) or ("=" in text and "://" not in text):
        try:
            postgres_params(text)
        except UnreadableTarget as exc:
            raise ValueError(f"--sink (not shown: it may hold a password): {exc}") from None
        return SinkSpec("postgresql", text, _table_name(collection))
    raise ValueError(f"--sink {shown(text, postgres=False).public!r}: {KINDS_HELP}")


def _query(spec: SinkSpec, allowed: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """The URL without its query, and the query's parameters, each one of
    ``allowed`` (another is refused by name)."""
    authority = spec.target.split("://", 1)[-1].split("/", 1)[0]
    if any(ch in authority.rpartition("@")[0] for ch in "?#"):
        raise ValueError(
            f"--sink {spec.describe()}: a ? or # in the user info ends the address for "
            f"{spec.kind}'s client (RFC 3986): percent-encode it (%3F, %23)"
        )
    parts = urlsplit(spec.target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise ValueError(
            f"--sink {spec.describe()}: {', '.join(map(repr, unknown))}: {spec.kind}:URL "
            f"takes the query parameters {', '.join(allowed)} only"
        )
    return urlunsplit(parts._replace(query="")), query


def milvus_connection(spec: SinkSpec) -> dict[str, Any]:
    """MilvusClient's arguments for ``--sink milvus-lite:PATH`` or
    ``milvus:URI``: the URI's ``?token=`` as ``token`` (pymilvus reads a user
    and password in the URI itself, and drops its query)."""
    if spec.kind == "milvus-lite":
        return {"uri": spec.target}
    uri, query = _query(spec, MILVUS_URI_PARAMETERS)
    return {"uri": uri, **({"token": query["token"]} if query.get("token") else {})}


def qdrant_connection(spec: SinkSpec) -> dict[str, Any]:
    """QdrantClient's arguments for ``--sink qdrant:PATH`` or ``qdrant:URL``:
    the URL's ``?api_key=`` (or $QDRANT_API_KEY) as ``api_key``, its
    ``?timeout=`` as ``timeout``; any other query parameter, and a user or
    password (Qdrant takes an API key), refused by name."""
    if not spec.target.startswith(("http://", "https://")):
        return {"path": spec.target}
    if "@" in urlsplit(spec.target).netloc or "@" in spec.target.split("://")[1].split("/")[0]:
        raise ValueError(
            f"--sink {spec.describe()}: Qdrant takes an API key, not a user and password: "
            f"give qdrant:URL?api_key=KEY or set {QDRANT_API_KEY_ENV}"
        )
    url, query = _query(spec, QDRANT_URL_PARAMETERS)
    found: dict[str, Any] = {"url": url}
    api_key = query.get("api_key") or os.environ.get(QDRANT_API_KEY_ENV)
    if api_key:
        found["api_key"] = api_key
    if "timeout" in query:
        if not query["timeout"].isdigit():
            raise ValueError(
                f"--sink {spec.describe()}: timeout={query['timeout']!r}: give whole seconds"
            )
        found["timeout"] = int(query["timeout"])
    return found


def _table_name(collection: str) -> str:
    """The PostgreSQL table of ``--collection``, lower-cased, or a refusal:
    letters, digits and underscores, and short enough that PostgreSQL cuts
    neither it nor the name of its index. A reserved word (``order``) is a
    name like another: the sink quotes every name it writes."""
    if not collection.isidentifier():
        raise ValueError(
            f"--collection {collection!r}: a PostgreSQL table name here is letters, digits "
            "and underscores, not starting with a digit"
        )
    longest = POSTGRES_MAX_NAME_BYTES - len(HNSW_SUFFIX)
    if len(collection.encode()) > longest:
        raise ValueError(
            f"--collection {collection!r}: {len(collection.encode())} bytes; PostgreSQL cuts "
            f"names at {POSTGRES_MAX_NAME_BYTES} bytes, and the table's index adds "
            f"{HNSW_SUFFIX!r}: give at most {longest} bytes"
        )
    return collection.lower()


class Sink(Protocol):
    def upsert(self, rows: ShardRows) -> None: ...

    def finish(self) -> None:
        """The run's last shard is loaded: build what is best built once
        (PostgreSQL's HNSW index, which slows a load kept up row by row)."""
        ...

    def close(self) -> None: ...


class MilvusSink:
    def __init__(self, spec: SinkSpec, dense_size: int | None, batch: int = 1000) -> None:
        from pymilvus import DataType, MilvusClient

        self.client = MilvusClient(**milvus_connection(spec))
        self.collection = spec.collection
        self.batch = batch
        self.dense = dense_size is not None
        if not self.client.has_collection(self.collection):
            schema = self.client.create_schema(auto_id=False)
            schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
            schema.add_field(SPARSE_FIELD, DataType.SPARSE_FLOAT_VECTOR)
            index = self.client.prepare_index_params()
            index.add_index(SPARSE_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
            if dense_size is not None:
                schema.add_field(DENSE_FIELD, DataType.FLOAT_VECTOR, dim=dense_size)
                index.add_index(DENSE_FIELD, index_type="AUTOINDEX", metric_type="IP")
            self.client.create_collection(self.collection, schema=schema, index_params=index)

    def upsert(self, rows: ShardRows) -> None:
        records: list[dict[str, Any]] = []
        for i, row_id in enumerate(rows.ids):
            record: dict[str, Any] = {
                "id": row_id,
                SPARSE_FIELD: dict(zip(rows.indices[i], rows.values[i])) or MILVUS_EMPTY_SPARSE,
            }
            if self.dense and rows.dense is not None:
                record[DENSE_FIELD] = rows.dense[i]
            records.append(record)
        for start in range(0, len(records), self.batch):
            self.client.upsert(self.collection, records[start : start + self.batch])

    def finish(self) -> None:
        pass  # its indexes are kept as it loads

    def close(self) -> None:
        self.client.close()


class QdrantSink:
    def __init__(self, spec: SinkSpec, dense_size: int | None, batch: int = 1000) -> None:
        from qdrant_client import QdrantClient, models

        self.models = models
        self.client = QdrantClient(**qdrant_connection(spec))
        self.collection = spec.collection
        self.batch = batch
        self.dense = dense_size is not None
        if not self.client.collection_exists(self.collection):
            vectors = (
                {DENSE_FIELD: models.VectorParams(size=dense_size, distance=models.Distance.DOT)}
                if dense_size is not None
                else {}
            )
            self.client.create_collection(
                self.collection,
                vectors_config=vectors,
                sparse_vectors_config={SPARSE_FIELD: models.SparseVectorParams()},
            )

    def upsert(self, rows: ShardRows) -> None:
        models = self.models
        points = []
        for i, row_id in enumerate(rows.ids):
            vector: dict[str, Any] = {
                SPARSE_FIELD: models.SparseVector(indices=rows.indices[i], values=rows.values[i])
            }
            if self.dense and rows.dense is not None:
                vector[DENSE_FIELD] = rows.dense[i]
            points.append(
                models.PointStruct(
                    id=qdrant_point_id(row_id), vector=vector, payload={"id": row_id}
                )
            )
        for start in range(0, len(points), self.batch):
            self.client.upsert(
                self.collection, points=points[start : start + self.batch], wait=True
            )

    def finish(self) -> None:
        pass  # its indexes are kept as it loads

    def close(self) -> None:
        self.client.close()


class PostgresSink:
    """A table of PostgreSQL with pgvector: ``id text PRIMARY KEY``, ``sparse
    sparsevec(V)`` (V the vocabulary; index = token id) and, with dense
    vectors, ``dense vector(H)``. Each shard is one transaction, upserted on
    the id. Every name is quoted (``psycopg.sql.Identifier``), never pasted."""

    def __init__(self, spec: SinkSpec, dense_size: int | None, vocab_size: int, hnsw: bool) -> None:
        import psycopg
        from pgvector.psycopg import register_vector
        from psycopg import sql

        self.table, self.vocab_size, self.dense = (
            spec.collection,
            vocab_size,
            dense_size is not None,
        )
        self._table = sql.Identifier(self.table)  # every statement quotes it
        self.hnsw = hnsw
        self.conn = psycopg.connect(spec.target, connect_timeout=10)
        try:
            with self.conn.transaction():
                self._create(dense_size)
            register_vector(self.conn)
        except BaseException:
            self.conn.close()
            raise

    def _create(self, dense_size: int | None) -> None:
        """The extension (if this user may), and the table (if missing), or a
        refusal when a table of that name has another shape."""
        from psycopg import sql

        conn = self.conn
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
            conn.execute("CREATE EXTENSION vector")
        wanted = {"id": "text", "sparse": f"sparsevec({self.vocab_size})"}
        if dense_size is not None:
            wanted["dense"] = f"vector({dense_size})"
        found: dict[str, str] = dict(
            conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
                (self._table.as_string(conn),),
            ).fetchall()
        )
        if found and found != wanted:
            raise TableMismatch(
                f"table {self.table!r} has the columns {found}, not {wanted}: give another "
                "--collection, or drop that table"
            )
        if not found:
            # The column types are this sink's own text (sizes are ints).
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}{}").format(
                    sql.Identifier(name),
                    sql.SQL(kind),
                    sql.SQL(" PRIMARY KEY" if name == "id" else ""),
                )
                for name, kind in wanted.items()
            )
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(self._table, columns))

    def upsert(self, rows: ShardRows) -> None:
        from pgvector import SparseVector
        from psycopg import sql

        names = ["id", "sparse", "dense"] if self.dense else ["id", "sparse"]
        statement = sql.SQL(
            "INSERT INTO {table} ({columns}) VALUES ({values}) "
            "ON CONFLICT (id) DO UPDATE SET {updates}"
        ).format(
            table=self._table,
            columns=sql.SQL(", ").join(map(sql.Identifier, names)),
            values=sql.SQL(", ").join(sql.Placeholder() * len(names)),
            updates=sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(name)) for name in names[1:]
            ),
        )
        records = []
        for i, row_id in enumerate(rows.ids):
            sparse = SparseVector(dict(zip(rows.indices[i], rows.values[i])), self.vocab_size)
            record: tuple[Any, ...] = (row_id, sparse)
            if self.dense and rows.dense is not None:
                import numpy as np

                record += (np.asarray(rows.dense[i], dtype=np.float32),)
            records.append(record)
        with self.conn.transaction(), self.conn.cursor() as cursor:
            cursor.executemany(statement, records)

    def index_sql(self) -> str:
        from psycopg import sql

        return (
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (sparse sparsevec_ip_ops)")
            .format(sql.Identifier(self.table + HNSW_SUFFIX), self._table)
            .as_string(self.conn)
        )

    def finish(self) -> None:
        """The HNSW index on sparse, built once over the loaded rows: kept up
        row by row as shards load, it slows the load many times over
        (benchmarks/RESULTS.md, section 11, has the figures)."""
        if self.hnsw:
            try:
                with self.conn.transaction():
                    self.conn.execute(self.index_sql())
            except Exception as exc:
                raise RuntimeError(f"{_reason(exc)}; build it with: {self.index_sql()}") from exc

    def close(self) -> None:
        self.conn.close()


class _Reporting:
    """A sink whose failures say which sink failed, and at what."""

    def __init__(self, spec: SinkSpec, sink: Sink) -> None:
        self.spec, self.sink = spec, sink

    def upsert(self, rows: ShardRows) -> None:
        try:
            self.sink.upsert(rows)
        except Exception as exc:
            raise SinkError(
                f"--sink {self.spec.describe()}: loading a shard failed: "
                f"{self.spec.reason(exc)}. "
                "The shard is not recorded as done: re-run the same command once the "
                "database is back"
            ) from exc

    def finish(self) -> None:
        try:
            self.sink.finish()
        except Exception as exc:
            raise SinkError(
                f"--sink {self.spec.describe()}: every shard is loaded and recorded, but "
                f"building the index failed: {self.spec.reason(exc)}. The shards are "
                "not loaded again: re-run the same command to build it"
            ) from exc

    def close(self) -> None:
        try:
            self.sink.close()
        except Exception:  # noqa: BLE001 -- closing a connection to a server that is gone
            return


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def open_reporting_sink(
    spec: SinkSpec, dense_size: int | None, vocab_size: int = 0, top_k: int | None = None
) -> Sink:
    """:func:`open_sink`, its failures as :class:`SinkError`."""
    try:
        sink = open_sink(spec, dense_size, vocab_size, top_k)
    except TableMismatch as exc:
        raise SinkError(f"--sink {spec.describe()}: refused: {spec.scrub(str(exc))}") from exc
    except Exception as exc:
        raise SinkError(f"--sink {spec.describe()}: cannot open it: {spec.reason(exc)}") from exc
    return _Reporting(spec, sink)


def sparse_hnsw(top_k: int | None) -> bool:
    """Whether the PostgreSQL table gets an HNSW index on ``sparse``: only
    when no row can have more non-zeros than pgvector's HNSW takes."""
    return top_k is not None and top_k <= HNSW_MAX_NONZEROS


def notes(spec: SinkSpec, top_k: int | None) -> list[str]:
    """What the command says before it loads, about what it will build."""
    if spec.kind == "postgresql" and not sparse_hnsw(top_k):
        return [
            f"--sink {spec.describe()}: no HNSW index on sparse: pgvector's HNSW takes at "
            f"most {HNSW_MAX_NONZEROS:,} non-zeros a vector, and a long document has more "
            f"(give --top-k {HNSW_MAX_NONZEROS} or less for one); a search scans the table"
        ]
    return []


def open_sink(
    spec: SinkSpec, dense_size: int | None, vocab_size: int = 0, top_k: int | None = None
) -> Sink:
    if spec.kind == "postgresql":
        return PostgresSink(spec, dense_size, vocab_size, sparse_hnsw(top_k))
    if spec.kind in ("milvus-lite", "milvus"):
        return MilvusSink(spec, dense_size)
    return QdrantSink(spec, dense_size)
