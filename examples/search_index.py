"""Search what `bge-m3-sparse index --sink qdrant:PATH` loaded, with a query
embedded by a running server.

    python examples/search_index.py --url http://127.0.0.1:8000 --qdrant models/qdrant \
        --corpus examples/sample_corpus.jsonl "a query"
"""

from __future__ import annotations

import argparse
import json

from qdrant_client import QdrantClient, models

from bge_m3_sparse_plugin.client import SparseEmbeddingClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--qdrant", required=True, help="the folder given to --sink qdrant:")
    parser.add_argument("--collection", default="bge_m3_sparse")
    parser.add_argument("--corpus", help="the indexed JSONL, to print the hits' texts")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()

    with SparseEmbeddingClient(args.url) as client:
        query = client.embed(args.query, sparse_format="indices_values").data[0].sparse_embedding
    texts = {}
    if args.corpus:
        with open(args.corpus) as f:
            texts = {row["id"]: row["text"] for row in map(json.loads, f)}
    qdrant = QdrantClient(path=args.qdrant)
    try:
        hits = qdrant.query_points(
            args.collection,
            query=models.SparseVector(**query),
            using="sparse",
            limit=args.top,
            with_payload=True,
        ).points
    finally:
        qdrant.close()
    print(f"query: {args.query!r}")
    for hit in hits:
        doc_id = hit.payload["id"]
        print(f"  {hit.score:7.4f}  {doc_id}  {texts.get(doc_id, '')[:90]}")


if __name__ == "__main__":
    main()
