"""The typed client: sparse formats, pruning and the lexical matching score.

Start a server first (see README.md), then:

    python examples/client.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio

from bge_m3_sparse_plugin.client import (
    AsyncSparseEmbeddingClient,
    SparseEmbeddingClient,
    SparseEmbeddingError,
    lexical_matching_score,
)

QUERY = "I love a large country"
DOCS = ["I love China", "hi, bge-m3", "China is a large country"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    args = parser.parse_args()

    # Connection failures and 503s are tried again 3 times, 0.5 s, 1 s and 2 s apart.
    with SparseEmbeddingClient(args.url, timeout=30, retries=3) as client:
        result = client.embed(QUERY, return_tokens=True, top_k=3, request_id="q-1")
        query = result.data[0]
        print(f"{result.request_id}, top 3 tokens:", query.sparse_embedding)
        docs = client.embed(DOCS, sparse_format="indices_values").data
        for text, doc in zip(DOCS, docs):
            print(
                f"score {lexical_matching_score(query, doc):.4f}  {text!r}  {doc.sparse_embedding}"
            )
        print(
            "lexical_weights:",
            client.embed("hi, bge-m3", sparse_format="lexical_weights").data[0].sparse_embedding,
        )
        try:
            client.embed([0, 10**6, 2])
        except SparseEmbeddingError as err:
            print(f"refused: status {err.status_code}, param {err.param}: {err.message}")

    async def concurrently() -> list[int]:
        async with AsyncSparseEmbeddingClient(args.url) as client:
            results = await asyncio.gather(*(client.embed(text, min_weight=0.1) for text in DOCS))
        return [len(r.data[0].sparse_embedding) for r in results]

    print("async, entries with weight >= 0.1:", asyncio.run(concurrently()))


if __name__ == "__main__":
    main()
