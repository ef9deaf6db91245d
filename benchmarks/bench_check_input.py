"""The input check at the largest request the plugin accepts: 1,024 sequences
of 8,192 token ids (bge-m3's length), as pydantic gets them from JSON.

    python benchmarks/bench_check_input.py

Compares, on the same lists, in interleaved rounds, the element-by-element
walk (which the check still uses to name a bad id) with the check as it runs
on valid input, and the whole request parse (SparseEmbeddingRequest).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, print_settings

from bge_m3_sparse_plugin.schemas import (
    SparseEmbeddingRequest,
    _check_token_ids,
    _name_the_bad_token_id,
)

N_SEQ, SEQ_LEN, VOCAB, ROUNDS = 1024, 8192, 250_002, 5


def main() -> None:
    rng = random.Random(0)
    ids = [[rng.randrange(VOCAB) for _ in range(SEQ_LEN)] for _ in range(N_SEQ)]
    print_settings(sequences=N_SEQ, ids_per_sequence=SEQ_LEN, rounds=ROUNDS)

    def walk() -> None:
        for i, item in enumerate(ids):
            _name_the_bad_token_id(item, f"data.input[{i}]")

    def check() -> None:
        for i, item in enumerate(ids):
            _check_token_ids(item, f"data.input[{i}]")

    def parse() -> None:
        SparseEmbeddingRequest.model_validate({"input": ids})

    times: dict[str, list[float]] = {"walk": [], "check": [], "parse": []}
    for _ in range(ROUNDS):
        for name, fn in (("walk", walk), ("check", check), ("parse", parse)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    for name, values in times.items():
        print(
            f"  {name:<6} median {median(values):.3f} s  (rounds: {', '.join(f'{v:.3f}' for v in values)})"
        )
    print(
        f"  check / walk: {median(times['check']) / median(times['walk']):.3f} of the time "
        f"({median(times['walk']) / median(times['check']):.1f}x faster)"
    )


if __name__ == "__main__":
    main()
