"""LlamaIndex: a VectorStoreIndex over Qdrant with hybrid queries, the dense
and sparse vectors from the plugin's server.

    python examples/llamaindex_hybrid.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import warnings

# Qdrant's local mode says so each time LlamaIndex asks it for a payload index.
warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    url = parser.parse_args().url
    with open("examples/sample_corpus.jsonl") as f:
        texts = [json.loads(line)["text"] for line in f][:100]

    from llama_index.core import Document, StorageContext, VectorStoreIndex
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    from bge_m3_sparse_plugin.integrations.llamaindex import BgeM3Sparse

    bge = BgeM3Sparse(url, return_dense=True)
    store = QdrantVectorStore(
        "docs",
        client=QdrantClient(":memory:"),
        enable_hybrid=True,
        sparse_doc_fn=bge.sparse_doc_fn,
        sparse_query_fn=bge.sparse_query_fn,
    )
    index = VectorStoreIndex.from_documents(
        [Document(text=t) for t in texts],
        embed_model=bge.embed_model,
        storage_context=StorageContext.from_defaults(vector_store=store),
    )
    retriever = index.as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=3, sparse_top_k=10
    )
    for hit in retriever.retrieve(texts[8]):
        print(f"{hit.score:.3f}  {hit.node.get_content()[:70]}")


if __name__ == "__main__":
    main()
