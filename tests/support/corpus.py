"""The generated corpus and the first run of `bge-m3-sparse index` that
tests/test_index.py and tests/test_index_sinks.py share (one engine start)."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bge_m3_sparse_plugin.index._output import ShardRows
from bge_m3_sparse_plugin.tiny_model import WORDS

ROWS_PER_SHARD = 40
N_PER_FORMAT = 100


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 120))) for _ in range(n)]


BAD_JSONL_LINES = [
    (b'{"id": "empty", "text": ""}', "the text is empty"),
    (b'{"id": "number", "text": 42}', "the text is int, not a string"),
    (b'{"id": "null", "text": null}', "the text is null, not a string"),
    (b'{"id": "list", "text": ["a", "b"]}', "the text is list, not a string"),
    (b'{"id": "no-text", "body": "a text under another name"}', "no 'text' field"),
    (b'{"id": "bytes", "text": "caf\xe9 au lait"}', "undecodable bytes"),
    (
        ('{"id": "too-long", "text": "' + "word " * 1100 + '"}').encode(),
        "tokens, more than the model's 1024",
    ),
    # Half of an emoji's UTF-16 pair, as a JSON escape: not Unicode text.
    (b'{"id": "surrogate", "text": "half \\ud83d of an emoji"}', "a lone surrogate"),
    # The first JSONL row's id again (its row is in the first shard).
    (b'{"id": "j0", "text": "a later row with the id of the first"}', "duplicate id"),
]


def make_corpus(folder: Path) -> dict:
    """100 rows each of JSONL (with the bad rows among them), Parquet and CSV."""
    jsonl_texts, parquet_texts, csv_texts = (
        texts(N_PER_FORMAT, 1),
        texts(N_PER_FORMAT, 2),
        texts(N_PER_FORMAT, 3),
    )
    lines = [json.dumps({"id": f"j{i}", "text": t}).encode() for i, t in enumerate(jsonl_texts)]
    for k, (line, _) in enumerate(BAD_JSONL_LINES):
        lines.insert(10 + 13 * k, line)
    (folder / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    pq.write_table(
        pa.table({"id": [f"p{i}" for i in range(N_PER_FORMAT)], "text": parquet_texts}),
        folder / "b.parquet",
    )
    with open(folder / "c.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text"])  # no id column: ids are file name and row
        writer.writerows([t] for t in csv_texts)
    good = {f"j{i}": t for i, t in enumerate(jsonl_texts)}
    good |= {f"p{i}": t for i, t in enumerate(parquet_texts)}
    good |= {f"c.csv:{i}": t for i, t in enumerate(csv_texts)}
    bytes_row = lines.index(BAD_JSONL_LINES[5][0])
    return {
        "folder": folder,
        "good": good,
        "rows": len(lines) + 2 * N_PER_FORMAT,
        "bytes_row": bytes_row,
    }


def job_of(model: str, files: list[Path], rows_per_shard: int):
    """The job `bge-m3-sparse index FILES OUT --model MODEL --dtype float32` runs."""
    from bge_m3_sparse_plugin.index._job import Job
    from bge_m3_sparse_plugin.index._types import EncodeOptions

    return Job(
        model=model,
        inputs=[str(f.resolve()) for f in files],
        input_sizes=[f.stat().st_size for f in files],
        input_mtimes=[f.stat().st_mtime_ns for f in files],
        id_column="id",
        text_column="text",
        rows_per_shard=rows_per_shard,
        options=EncodeOptions(),
        dtype="float32",
        max_model_len=None,
        plugin_version="0",
        vllm_version=None,
    )


def index_cmd(
    model_dir: Path,
    corpus: dict | Path,
    out: Path,
    *extra: str,
    rows_per_shard: int = ROWS_PER_SHARD,
) -> list[str]:
    """The command on ``corpus`` (the generated corpus's folder, or a file)."""
    return [
        sys.executable,
        "-m",
        "bge_m3_sparse_plugin",
        "index",
        str(corpus["folder"] if isinstance(corpus, dict) else corpus),
        str(out),
        "--model",
        str(model_dir),
        "--dtype",
        "float32",
        "--rows-per-shard",
        str(rows_per_shard),
        "--batch-size",
        "16",
        *extra,
    ]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def read_output(out: Path) -> dict[str, dict]:
    table = pq.read_table(sorted(out.glob("part-*.parquet")))
    rows = table.to_pylist()
    by_id = {row["id"]: row for row in rows}
    assert len(by_id) == len(rows), "an id appears twice"
    return by_id


def shard_rows(out: Path) -> list[ShardRows]:
    """Each shard of ``out`` as the sinks get it, in order."""
    result = []
    for path in sorted(out.glob("part-*.parquet")):
        table = pq.read_table(path).to_pydict()
        result.append(
            ShardRows(
                ids=table["id"],
                indices=table["indices"],
                values=table["values"],
                num_tokens=table["num_tokens"],
                dense=table.get("dense"),
            )
        )
    return result


def shard_stats(out: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("part-*.parquet")}
