"""The output folder: Parquet shards written whole, the manifest, the error log.

A shard is written under a temporary name and renamed when complete, then
recorded in ``_manifest.json`` (itself replaced whole): a reader never sees
half a shard, and a shard in the manifest is never written again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import OutputMismatch

__all__ = [
    "ERRORS",
    "FORMAT_VERSION",
    "MANIFEST",
    "Manifest",
    "ShardRows",
    "append_errors",
    "check_output_path",
    "indexed_ids",
    "keep_errors",
    "read_errors",
    "shard_index",
    "shard_name",
    "vector_columns",
    "write_shard",
]

MANIFEST = "_manifest.json"
ERRORS = "_errors.jsonl"
# 2: inputs recorded with their modification times, the sink's finish
# recorded, duplicate ids reported, FILE:ROW ids from the inputs' folder.
FORMAT_VERSION = 2


def check_output_path(output: Path) -> None:
    """OUTPUT is a folder, or can be made one: a ValueError naming it when it
    is a file, or lies under one."""
    if output.exists() and not output.is_dir():
        raise ValueError(
            f"OUTPUT {str(output)!r} is a file: give a folder (a new one, or one this "
            "command wrote)"
        )
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(
                    f"OUTPUT {str(output)!r}: {str(parent)!r} is a file, so no folder can "
                    "be made under it"
                )
            return


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def shard_index(name: str) -> int:
    """The inverse of :func:`shard_name`."""
    return int(name.removeprefix("part-").removesuffix(".parquet"))


@dataclass
class Manifest:
    """What made the output (``job``) and which shards are done."""

    job: dict[str, Any]
    shards: dict[str, dict[str, int]] = field(default_factory=dict)
    # The job's sink has loaded every shard and built what it builds once: a
    # job is finished when every shard is recorded and this is true (or it
    # has no sink).
    sink_finished: bool = False

    @classmethod
    def open(cls, folder: Path, job: dict[str, Any]) -> Manifest:
        """The folder's manifest, or a new one; refuses one made for another job."""
        path = folder / MANIFEST
        if not path.exists():
            return cls(job=job)
        saved = json.loads(path.read_text())
        fresh = f"start fresh: remove the folder (rm -r {folder}) or give another OUTPUT"
        if saved.get("format") != FORMAT_VERSION:
            raise OutputMismatch(
                f"{folder} holds output of format {saved.get('format')!r}, written by another "
                f"version of the plugin, and this one writes format {FORMAT_VERSION} (its rows "
                f"and ids may differ): {fresh}"
            )
        changed = _input_changes(saved["job"], job)
        if changed:
            raise OutputMismatch(
                f"{folder} holds the output of another job ({'; '.join(changed)}). Its shards "
                f"hold what the inputs held then; to index them as they are now, {fresh}"
            )
        differences = [
            f"{key}: {saved['job'].get(key)!r} there, {job.get(key)!r} now"
            for key in sorted(set(saved["job"]) | set(job))
            if key not in _NOT_COMPARED and saved["job"].get(key) != job.get(key)
        ]
        if differences:
            raise OutputMismatch(
                f"{folder} holds the output of another job ({'; '.join(differences)}). "
                f"Re-run with the same settings to resume it, or {fresh}"
            )
        return cls(
            job=saved["job"],
            shards=saved.get("shards", {}),
            sink_finished=saved.get("sink_finished", False),
        )

    def save(self, folder: Path) -> None:
        body = {
            "format": FORMAT_VERSION,
            "job": self.job,
            "shards": self.shards,
            "sink_finished": self.sink_finished,
        }
        _replace(folder / MANIFEST, json.dumps(body, indent=1, sort_keys=True).encode())

    def totals(self) -> dict[str, int]:
        keys = ("rows", "documents", "errors", "tokens")
        return {k: sum(s.get(k, 0) for s in self.shards.values()) for k in keys}


# Versions are recorded, not compared: a resumed run on a newer plugin or
# vLLM of the same model and options gives the same vectors.
_NOT_COMPARED = {"plugin_version", "vllm_version"}


def _input_changes(saved: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """The input files that changed since the saved job read them, by name
    (the same files in the same order, only their sizes or times differ)."""
    keys = ("input_sizes", "input_mtimes")
    if saved.get("inputs") != job.get("inputs") or any(k not in saved for k in keys):
        return []
    return [
        f"{path} changed since it was read: size {size_then:,} then, {size_now:,} now, "
        f"modified {_when(mtime_then)} then, {_when(mtime_now)} now"
        for path, size_then, size_now, mtime_then, mtime_now in zip(
            job["inputs"], saved[keys[0]], job[keys[0]], saved[keys[1]], job[keys[1]]
        )
        if (size_then, mtime_then) != (size_now, mtime_now)
    ]


def _when(mtime_ns: int) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(mtime_ns / 1e9, datetime.timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class ShardRows:
    """The columns of one shard."""

    ids: list[str] = field(default_factory=list)
    indices: list[list[int]] = field(default_factory=list)
    values: list[list[float]] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    dense: list[list[float]] | None = None


def vector_columns(
    num_tokens: list[int | None],
    indices: list[list[int] | None],
    values: list[list[float] | None],
    dense: list[list[float] | None] | None,
    dense_size: int | None = None,
) -> dict[str, Any]:
    """The vector columns of a shard (and of a Ray replica's output), as
    pyarrow arrays: the one place their types are written."""
    import pyarrow as pa

    columns: dict[str, Any] = {
        "indices": pa.array(indices, pa.list_(pa.int32())),
        "values": pa.array(values, pa.list_(pa.float32())),
        "num_tokens": pa.array(num_tokens, pa.int32()),
    }
    if dense is not None:
        kind = pa.list_(pa.float32(), dense_size) if dense_size else pa.list_(pa.float32())
        columns["dense"] = pa.array(dense, kind)
    return columns


def write_shard(folder: Path, name: str, rows: ShardRows, dense_size: int | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dense = (rows.dense or []) if dense_size is not None else None
    columns = {
        "id": pa.array(rows.ids, pa.string()),
        **vector_columns(rows.num_tokens, rows.indices, rows.values, dense, dense_size),  # type: ignore[arg-type]
    }
    table = pa.table(columns)
    tmp = folder / (name + ".tmp")
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)


def read_errors(folder: Path) -> list[dict[str, Any]]:
    """The error log's records. A last line without its newline is a write
    that a crash cut short (its shard was never recorded): it is left out."""
    return _read_errors(folder)[0]


def _read_errors(folder: Path) -> tuple[list[dict[str, Any]], bool]:
    """The error log's complete records, and whether a torn last line follows them."""
    path = folder / ERRORS
    if not path.exists():
        return [], False
    *lines, torn = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    errors = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            errors.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}, line {number}: not a JSON record ({exc.msg})") from None
    return errors, bool(torn)


def indexed_ids(folder: Path, shards: Iterable[str]) -> set[str]:
    """The ids in these shards: the rows an earlier run indexed."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for name in shards:
        ids.update(pq.read_table(folder / name, columns=["id"]).column("id").to_pylist())
    return ids


def keep_errors(folder: Path, shards: Iterable[str]) -> None:
    """Keep only the errors of these shards: a shard that was not recorded as
    done is done again, and its errors found again."""
    done = set(shards)
    errors, torn = _read_errors(folder)
    kept = [e for e in errors if e.get("shard") in done]
    if torn or len(kept) != len(errors):
        _replace(folder / ERRORS, "".join(json.dumps(e) + "\n" for e in kept).encode())


def append_errors(folder: Path, errors: list[dict[str, Any]]) -> None:
    if not errors:
        return
    with open(folder / ERRORS, "a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in errors))
        f.flush()
        os.fsync(f.fileno())
