"""Load each finished shard into a vector database too: Milvus or Qdrant.

``--sink milvus-lite:PATH`` and ``--sink qdrant:PATH`` run the database
in-process (Milvus Lite, ``QdrantClient(path=...)``); ``--sink milvus:URI``
and ``--sink qdrant:URL`` point at a server. The upsert is keyed on the row's
id, so a shard loaded twice (a run killed after loading it, before recording
it) leaves each point once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from ._output import ShardRows

__all__ = [
    "DENSE_FIELD",
    "SPARSE_FIELD",
    "Sink",
    "SinkSpec",
    "open_sink",
    "parse_sink",
    "qdrant_point_id",
]

SPARSE_FIELD = "sparse"
DENSE_FIELD = "dense"
KINDS = ("milvus-lite", "milvus", "qdrant")
# Qdrant takes unsigned integers or UUIDs as point ids: a row's id maps to a
# UUID, the same in every run, and is kept in the payload as "id".
_QDRANT_NAMESPACE = uuid.UUID("6b7c1d0e-6a3f-4a58-9d6e-0b6d3c7e5a10")


def qdrant_point_id(row_id: str) -> str:
    return str(uuid.uuid5(_QDRANT_NAMESPACE, row_id))


@dataclass(frozen=True)
class SinkSpec:
    kind: str  # milvus-lite, milvus, qdrant
    target: str  # a path, a URI or a URL
    collection: str

    def describe(self) -> str:
        return f"{self.kind}:{self.target} (collection {self.collection!r})"


def parse_sink(text: str, collection: str) -> SinkSpec:
    kind, sep, target = text.partition(":")
    if not sep or kind not in KINDS or not target:
        raise ValueError(
            f"--sink {text!r}: give milvus-lite:PATH, milvus:URI, qdrant:PATH (embedded) or "
            "qdrant:URL (a server)"
        )
    return SinkSpec(kind, target, collection)


class Sink(Protocol):
    def upsert(self, rows: ShardRows) -> None: ...

    def close(self) -> None: ...


class MilvusSink:
    def __init__(self, spec: SinkSpec, dense_size: int | None, batch: int = 1000) -> None:
        from pymilvus import DataType, MilvusClient

        self.client = MilvusClient(spec.target)
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
                SPARSE_FIELD: dict(zip(rows.indices[i], rows.values[i])),
            }
            if self.dense and rows.dense is not None:
                record[DENSE_FIELD] = rows.dense[i]
            records.append(record)
        # Milvus refuses an empty sparse vector; such a row has nothing to match.
        records = [r for r in records if r[SPARSE_FIELD]]
        for start in range(0, len(records), self.batch):
            self.client.upsert(self.collection, records[start : start + self.batch])

    def close(self) -> None:
        self.client.close()


class QdrantSink:
    def __init__(self, spec: SinkSpec, dense_size: int | None, batch: int = 1000) -> None:
        from qdrant_client import QdrantClient, models

        self.models = models
        embedded = not spec.target.startswith(("http://", "https://"))
        self.client = QdrantClient(path=spec.target) if embedded else QdrantClient(url=spec.target)
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

    def close(self) -> None:
        self.client.close()


def open_sink(spec: SinkSpec, dense_size: int | None) -> Sink:
    if spec.kind in ("milvus-lite", "milvus"):
        return MilvusSink(spec, dense_size)
    return QdrantSink(spec, dense_size)
