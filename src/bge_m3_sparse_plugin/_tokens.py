"""Token strings for the optional ``token`` field, decoded once per id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TokenDecoder", "special_token_ids"]


def special_token_ids(tokenizer: Any) -> frozenset[int]:
    """The ids FlagEmbedding drops from lexical weights: cls, eos, pad and unk."""
    ids = set()
    for name in ("cls_token", "eos_token", "pad_token", "unk_token"):
        token = tokenizer.special_tokens_map.get(name)
        if token is not None:
            ids.add(int(tokenizer.convert_tokens_to_ids(token)))
    return frozenset(ids)


class TokenDecoder:
    """Decodes single token ids as FlagEmbedding's ``convert_id_to_token`` does.

    That is ``tokenizer.decode([id])``. Strings are cached per id: the cache
    grows to at most the vocabulary size and never changes meaning, so it is
    safe to share between requests.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def decode(self, token_ids: Sequence[int]) -> list[str]:
        cache = self._cache
        try:
            return list(map(cache.__getitem__, token_ids))
        except KeyError:
            missing = [i for i in dict.fromkeys(token_ids) if i not in cache]
            cache.update(zip(missing, self._tokenizer.batch_decode([[i] for i in missing])))
            return list(map(cache.__getitem__, token_ids))
