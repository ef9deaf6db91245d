"""pymilvus-model's BGEM3EmbeddingFunction as Milvus's docs use it (written
anew here): documents and queries embedded, stored in a collection with a
dense and a sparse field, and a hybrid search fused by RRFRanker.

``tests/test_dropin_milvus.py`` runs this file as it is, on pymilvus-model,
and with its import line changed to the plugin's drop-in, and compares the
two ``RESULT``s. ``python FILE MODEL DB`` runs it alone."""

import sys

from pymilvus import AnnSearchRequest, DataType, MilvusClient, RRFRanker
from pymilvus.model.hybrid import BGEM3EmbeddingFunction

MODEL = sys.argv[1] if len(sys.argv) > 1 else "BAAI/bge-m3"
DB = sys.argv[2] if len(sys.argv) > 2 else "milvus_demo.db"

ef = BGEM3EmbeddingFunction(model_name=MODEL, device="cpu", use_fp16=False)
dense_dim = ef.dim["dense"]

docs = [
    "Artificial intelligence was founded as an academic discipline in 1956.",
    "Alan Turing was the first person to conduct substantial research in AI.",
    "Born in Maida Vale, London, Turing was raised in southern England.",
    "The Great Wall of China stretches across mountains and deserts.",
    "Pandas eat bamboo for most of the day.",
]
queries = ["Who started AI research?", "What do pandas eat?"]

docs_embeddings = ef.encode_documents(docs)
query_embeddings = ef.encode_queries(queries)
called = ef(docs[:2])

client = MilvusClient(DB)
if client.has_collection("hybrid_demo"):
    client.drop_collection("hybrid_demo")
schema = client.create_schema(auto_id=False)
schema.add_field("id", DataType.INT64, is_primary=True)
schema.add_field("text", DataType.VARCHAR, max_length=512)
schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dense_dim)
schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
index_params = client.prepare_index_params()
index_params.add_index("dense", index_type="FLAT", metric_type="IP")
index_params.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
client.create_collection("hybrid_demo", schema=schema, index_params=index_params)
client.insert(
    "hybrid_demo",
    [
        {
            "id": i,
            "text": docs[i],
            "dense": docs_embeddings["dense"][i],
            "sparse": docs_embeddings["sparse"][[i]],
        }
        for i in range(len(docs))
    ],
)

hits = []
for q in range(len(queries)):
    dense_request = AnnSearchRequest(
        [query_embeddings["dense"][q]], "dense", {"metric_type": "IP"}, limit=5
    )
    sparse_request = AnnSearchRequest(
        [query_embeddings["sparse"][[q]]], "sparse", {"metric_type": "IP"}, limit=5
    )
    found = client.hybrid_search(
        "hybrid_demo",
        [sparse_request, dense_request],
        ranker=RRFRanker(),
        limit=5,
        output_fields=["text"],
    )
    hits.append([(hit["id"], hit["entity"]["text"]) for hit in found[0]])
client.close()

RESULT = {
    "dim": ef.dim,
    "docs": docs_embeddings,
    "queries": query_embeddings,
    "called": called,
    "hits": hits,
}
print(hits)
