"""Hybrid (dense + sparse) search in Milvus Lite, with BGE-M3 embeddings from the plugin.

Embeds a small corpus through a running vLLM server with the plugin (dense and
sparse from one request), stores it in Milvus Lite (local storage at --db, no server),
and runs sparse, dense and hybrid (RRF) searches. Needs
``pip install 'bge-m3-sparse-plugin[client,milvus]'``. Start a server (see
README.md), then:

    python examples/hybrid_search_milvus.py --url http://127.0.0.1:8000 --db models/hybrid.db
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pymilvus import AnnSearchRequest, DataType, MilvusClient, RRFRanker

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

CORPUS = [
    "BGE-M3 gives dense, sparse and multi-vector embeddings from one model.",
    "Sparse embeddings weight the tokens of a text, like a learned BM25.",
    "Dense embeddings place a whole text at one point of a vector space.",
    "ColBERT scores a query against a document token by token.",
    "vLLM serves language models with continuous batching.",
    "An IO-processor plugin turns vLLM's pooled outputs into a custom response.",
    "Milvus stores dense and sparse vectors side by side in one collection.",
    "Reciprocal rank fusion merges rankings without calibrating their scores.",
    "The Great Wall of China stretches across mountains and deserts.",
    "I love China and its many regional cuisines.",
    "Beijing is the capital of China; Shanghai is its largest city.",
    "Pandas eat bamboo for most of the day.",
    "The Yangtze is the longest river in Asia.",
    "Tea was first drunk in southwest China thousands of years ago.",
    "A lighthouse guides ships past dangerous rocks at night.",
    "The recipe needs flour, butter, sugar and two eggs.",
    "Bake the bread at 220 degrees for forty minutes.",
    "Sourdough rises slowly because of its wild yeast.",
    "The marathon runner trained through the winter.",
    "Football is the most watched sport in the world.",
    "The chess champion sacrificed her queen to win the game.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
    "Volcanoes form where tectonic plates pull apart or collide.",
    "The Moon's gravity raises the tides of the oceans.",
    "Jupiter is the largest planet of the solar system.",
    "A black hole bends light that passes close to it.",
    "The violinist played a sonata by Bach.",
    "Jazz grew out of blues and ragtime in New Orleans.",
    "The museum shows paintings from the Ming dynasty.",
    "Learning a language is easier with daily practice.",
    "The train from Paris to Lyon takes two hours.",
    "Bicycles are the fastest way to cross the old town.",
]

QUERIES = [
    "What does BGE-M3 return?",
    "capital city of China",
    "how to bake bread",
    "planets and gravity",
]

COLLECTION = "bge_m3_docs"


@dataclass
class Embedded:
    dense: list[list[float]]
    sparse: list[dict[int, float]]  # token id -> weight, as Milvus takes it


def embed(client: SparseEmbeddingClient, texts: list[str]) -> Embedded:
    """Dense and sparse vectors of ``texts`` from one request each way."""
    result = client.embed(texts, return_dense=True, sparse_format="indices_values")
    return Embedded(
        dense=[item.dense_embedding for item in result.data],
        sparse=[
            dict(zip(item.sparse_embedding["indices"], item.sparse_embedding["values"]))
            for item in result.data
        ],
    )


def build_collection(milvus: MilvusClient, texts: list[str], vectors: Embedded) -> None:
    if milvus.has_collection(COLLECTION):
        milvus.drop_collection(COLLECTION)
    schema = milvus.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=1024)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=len(vectors.dense[0]))
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    index = milvus.prepare_index_params()
    # Dense vectors are normalised: inner product is cosine similarity.
    index.add_index("dense", index_type="FLAT", metric_type="IP")
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
    milvus.create_collection(COLLECTION, schema=schema, index_params=index)
    milvus.insert(
        COLLECTION,
        [
            {"id": i, "text": text, "dense": vectors.dense[i], "sparse": vectors.sparse[i]}
            for i, text in enumerate(texts)
        ],
    )


Hit = tuple[int, float, str]  # doc id, score, text


def _hits(result) -> list[Hit]:
    return [(hit["id"], float(hit["distance"]), hit["entity"]["text"]) for hit in result[0]]


def sparse_search(milvus: MilvusClient, query: dict[int, float], limit: int) -> list[Hit]:
    """Inner product of sparse vectors: FlagEmbedding's lexical matching score."""
    return _hits(
        milvus.search(
            COLLECTION,
            data=[query],
            anns_field="sparse",
            limit=limit,
            search_params={"metric_type": "IP"},
            output_fields=["text"],
        )
    )


def dense_search(milvus: MilvusClient, query: list[float], limit: int) -> list[Hit]:
    return _hits(
        milvus.search(
            COLLECTION,
            data=[query],
            anns_field="dense",
            limit=limit,
            search_params={"metric_type": "IP"},
            output_fields=["text"],
        )
    )


def hybrid_search(
    milvus: MilvusClient, dense: list[float], sparse: dict[int, float], limit: int
) -> list[Hit]:
    """Both searches, merged by reciprocal rank fusion (k=60)."""
    requests = [
        AnnSearchRequest([dense], "dense", {"metric_type": "IP"}, limit=limit),
        AnnSearchRequest([sparse], "sparse", {"metric_type": "IP"}, limit=limit),
    ]
    return _hits(
        milvus.hybrid_search(
            COLLECTION,
            requests,
            RRFRanker(60),
            limit=limit,
            output_fields=["text"],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default=None, help="the server's served model name")
    parser.add_argument("--db", default="hybrid.db", help="where Milvus Lite keeps its data")
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args()

    with SparseEmbeddingClient(args.url, model=args.model) as client:
        docs = embed(client, CORPUS)
        queries = embed(client, QUERIES)
    milvus = MilvusClient(args.db)
    build_collection(milvus, CORPUS, docs)
    print(
        f"{len(CORPUS)} docs in Milvus Lite ({args.db}): dense dim {len(docs.dense[0])}, "
        f"{sum(map(len, docs.sparse)) / len(CORPUS):.1f} sparse entries per doc"
    )
    for i, query in enumerate(QUERIES):
        print(f"\nquery: {query}")
        for name, hits in (
            ("sparse", sparse_search(milvus, queries.sparse[i], args.top)),
            ("dense", dense_search(milvus, queries.dense[i], args.top)),
            ("hybrid", hybrid_search(milvus, queries.dense[i], queries.sparse[i], args.top)),
        ):
            for rank, (doc_id, score, text) in enumerate(hits, 1):
                label = name if rank == 1 else ""
                print(f"  {label:<7}{rank}. [{doc_id:2d}] {score:.4f}  {text}")
    milvus.close()


if __name__ == "__main__":
    main()
