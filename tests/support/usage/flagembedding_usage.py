"""BGEM3FlagModel as FlagEmbedding's README uses it (written anew here):
dense, sparse and ColBERT vectors, their scores, and compute_score.

``tests/test_dropin_flagembedding.py`` runs this file as it is, on
FlagEmbedding, and with its import line changed to the plugin's drop-in, and
compares the two ``RESULT``s whole. ``python FILE MODEL`` runs it alone."""

import sys

from FlagEmbedding import BGEM3FlagModel

MODEL = sys.argv[1] if len(sys.argv) > 1 else "BAAI/bge-m3"

model = BGEM3FlagModel(MODEL, use_fp16=False)

sentences_1 = ["What is BGE M3?", "Definition of BM25"]
sentences_2 = [
    "BGE M3 is an embedding model supporting dense retrieval, lexical matching and "
    "multi-vector interaction.",
    "BM25 is a bag-of-words retrieval function that ranks a set of documents based on the "
    "query terms appearing in each document",
]

# Dense vectors, and their similarity.
embeddings_1 = model.encode(sentences_1, batch_size=12, max_length=1024)["dense_vecs"]
embeddings_2 = model.encode(sentences_2)["dense_vecs"]
similarity = embeddings_1 @ embeddings_2.T

# Lexical weights, as tokens, and their matching score.
output_1 = model.encode(sentences_1, return_dense=True, return_sparse=True)
output_2 = model.encode(sentences_2, return_dense=True, return_sparse=True)
tokens = model.convert_id_to_token(output_1["lexical_weights"])
lexical = model.compute_lexical_matching_score(
    output_1["lexical_weights"][0], output_2["lexical_weights"][0]
)
lexical_matrix = model.compute_lexical_matching_score(
    output_1["lexical_weights"], output_2["lexical_weights"]
)

# ColBERT vectors and their score.
output_1 = model.encode(
    sentences_1, return_dense=True, return_sparse=True, return_colbert_vecs=True
)
output_2 = model.encode(
    sentences_2, return_dense=True, return_sparse=True, return_colbert_vecs=True
)
colbert = model.colbert_score(output_1["colbert_vecs"][0], output_2["colbert_vecs"][0])

# All the scores of each pair.
sentence_pairs = [[i, j] for i in sentences_1 for j in sentences_2]
scores = model.compute_score(
    sentence_pairs, max_passage_length=128, weights_for_different_modes=[0.4, 0.2, 0.4]
)
one_pair = model.compute_score(sentence_pairs[0])

# Queries with an instruction, one text unbatched.
queries = model.encode_queries(["what is bm25"], return_sparse=True)
single = model.encode("What is BGE M3?", return_sparse=True, return_colbert_vecs=True)

RESULT = {
    "similarity": similarity,
    "output_1": output_1,
    "output_2": output_2,
    "tokens": tokens,
    "lexical": lexical,
    "lexical_matrix": lexical_matrix,
    "colbert": colbert,
    "scores": scores,
    "one_pair": one_pair,
    "queries": queries,
    "single": single,
}
print({key: type(value).__name__ for key, value in RESULT.items()})
