"""Haystack: an indexing pipeline and a hybrid query pipeline on Qdrant's
in-memory document store, the embedders talking to the plugin's server.

    python examples/haystack_hybrid.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--dim",
        type=int,
        default=128,
        help="the dense size: 1024 for bge-m3, 128 for the small model",
    )
    args = parser.parse_args()
    url = args.url
    with open("examples/sample_corpus.jsonl") as f:
        texts = [json.loads(line)["text"] for line in f][:100]

    from haystack import Document, Pipeline
    from haystack.components.writers import DocumentWriter
    from haystack_integrations.components.retrievers.qdrant import QdrantHybridRetriever
    from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

    from bge_m3_sparse_plugin.integrations.haystack import (
        BgeM3SparseDocumentEmbedder,
        BgeM3SparseTextEmbedder,
    )

    store = QdrantDocumentStore(
        ":memory:", use_sparse_embeddings=True, embedding_dim=args.dim, progress_bar=False
    )
    indexing = Pipeline()
    indexing.add_component("embedder", BgeM3SparseDocumentEmbedder(url, return_dense=True))
    indexing.add_component("writer", DocumentWriter(store))
    indexing.connect("embedder", "writer")
    indexing.run({"embedder": {"documents": [Document(content=t) for t in texts]}})

    query = Pipeline()
    query.add_component("embedder", BgeM3SparseTextEmbedder(url, return_dense=True))
    query.add_component("retriever", QdrantHybridRetriever(store, top_k=3))
    query.connect("embedder.sparse_embedding", "retriever.query_sparse_embedding")
    query.connect("embedder.embedding", "retriever.query_embedding")
    for doc in query.run({"embedder": {"text": texts[8]}})["retriever"]["documents"]:
        print(f"{doc.score:.3f}  {doc.content[:70]}")


if __name__ == "__main__":
    main()
