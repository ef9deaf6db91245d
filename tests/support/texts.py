"""Texts for the parity suite: each names the case it covers."""

# The cases whose lexical weights are empty by design: an empty text has only
# <s> and </s>, which FlagEmbedding drops.
EMPTY_BY_DESIGN = {"empty"}

PARITY_TEXTS: dict[str, str] = {
    "seed_english": "I love China",
    "seed_punctuation": "hi, bge-m3",
    "english_sentence": "The search engine ranks every document by its sparse and dense score.",
    "punctuation": "Wait... what?! (Really) -- yes; [no] {maybe}: 'quoted' \"double\".",
    "multilingual": "我爱中国. Поиск документов. Le modèle français, schöne Grüße. αβγ.",
    "outside_vocabulary": "snow ☃ and fire 🔥 with ✓ marks",
    "literal_eos_bos": "before </s> middle <s> after </s> end",
    "heavy_repetition": "love love love China China love the the the " * 12,
    "one_character": "a",
    "empty": "",
    "digits": "0123456789 42 3.14 2026-12-02",
}

# Well over 512 tokens, under the small model's 1024: FlagEmbedding's default
# max_length of 512 would truncate it, so the suite passes max_length.
LONG_TEXT = " ".join(
    f"document {i} about search and retrieval of the world's data in many languages;"
    for i in range(50)
)


def generated_texts(n: int, words: int, seed: int = 0) -> list[str]:
    """``n`` deterministic texts of ``words`` words of the small model's
    vocabulary (one token each; the first 50 words also capitalised): the
    tests' and the benchmarks' (benchmarks/_common.py: documents) one maker."""
    import random

    from bge_m3_sparse_plugin.tiny_model import WORDS

    rng = random.Random(seed)
    pool = list(WORDS) + [w.capitalize() for w in WORDS[:50]]
    return [" ".join(rng.choice(pool) for _ in range(words)) + "." for _ in range(n)]
