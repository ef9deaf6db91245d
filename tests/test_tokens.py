"""Token strings and special ids, on the small model's real tokenizer."""

from __future__ import annotations

from bge_m3_sparse_plugin._tokens import TokenDecoder, special_token_ids


def test_special_ids_are_flagembeddings(tokenizer):
    # FlagEmbedding drops cls, eos, pad and unk: <s>, </s>, <pad>, <unk>.
    assert special_token_ids(tokenizer) == frozenset({0, 1, 2, 3})


def test_decoder_equals_single_id_decode(tokenizer):
    ids = tokenizer("I love China, hi bge-m3 我爱中国")["input_ids"][1:-1]
    decoder = TokenDecoder(tokenizer)
    want = [tokenizer.decode([i]) for i in ids]
    assert decoder.decode(ids) == want
    assert decoder.decode(list(reversed(ids))) == list(reversed(want))  # from the cache
    assert decoder.decode([]) == []
