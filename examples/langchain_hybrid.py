"""LangChain: hybrid search (BGE-M3 dense + sparse) in Qdrant's in-memory mode,
every vector from the plugin's server, one request per batch for both.

    python examples/langchain_hybrid.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    url = parser.parse_args().url
    with open("examples/sample_corpus.jsonl") as f:
        texts = [json.loads(line)["text"] for line in f][:100]

    from langchain_qdrant import QdrantVectorStore, RetrievalMode

    from bge_m3_sparse_plugin.integrations.langchain import BgeM3SparseEmbeddings

    sparse = BgeM3SparseEmbeddings(url, return_dense=True)  # one request: both vectors
    store = QdrantVectorStore.from_texts(
        texts,
        embedding=sparse.dense_embeddings,
        sparse_embedding=sparse,
        location=":memory:",
        retrieval_mode=RetrievalMode.HYBRID,
    )
    for doc in store.similarity_search(texts[8], k=3):
        print(doc.page_content[:70])


if __name__ == "__main__":
    main()
