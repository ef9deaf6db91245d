"""What each process of a run uses, sampled from outside: RSS and CPU seconds, by role.

A role names what a process is for: the command itself, vLLM's engine core
and model worker, and Ray's daemons, idle workers, read tasks and replica
actors. Processes that come and go (Ray's task workers) are summed by role.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psutil

from bge_m3_sparse_plugin.index._output import MANIFEST

__all__ = ["ProcessWatch", "role", "rows_done"]

LOOK_AGAIN = ("other:", "Ray idle workers", "gone")  # roles that may still change


def role(proc: psutil.Process, root: int) -> str:
    """What ``proc`` is, in a run whose first process is ``root``."""
    if proc.pid == root:
        return "command"
    try:
        name = proc.name()
        args = " ".join(proc.cmdline()[:4])
    except psutil.Error:
        return "gone"
    title = args if args.startswith("ray::") else name
    if title.startswith("ray::"):  # Ray's workers name themselves by what they run
        if "Replica" in title:
            return "Ray replica actor"
        if "IDLE" in title:
            return "Ray idle workers"
        if "read_file" in title:
            return "Ray read tasks"
        return f"Ray worker: {title[5:40]}"
    if "EngineCore" in name:
        return "engine core"
    if "Worker" in name or "Worker" in args:
        return "model worker"
    for part, label in [
        ("raylet", "Ray raylet"),
        ("gcs_server", "Ray GCS"),
        ("dashboard", "Ray dashboard and agents"),
        ("runtime_env", "Ray dashboard and agents"),
        ("log_monitor", "Ray log monitor"),
        ("monitor.py", "Ray log monitor"),
    ]:
        if part in name or part in args:
            return label
    if "resource_tracker" in args:
        return "multiprocessing resource tracker"
    return f"other: {args[:40]}"


def rows_done(out: Path) -> int:
    """The rows the index command has recorded in ``out``'s manifest so far."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return 0
    return sum(s.get("rows", 0) for s in manifest.get("shards", {}).values())


class ProcessWatch:
    """Samples, every ``every`` seconds, each process of the tree under
    ``pid``, and every other process started since it (Ray's): its role, RSS
    and CPU seconds (user + system), with the rows recorded in ``out`` so
    far. Stops when that process ends. Run it on an otherwise idle machine:
    any process started meanwhile counts, under a role of "other"."""

    def __init__(self, pid: int, out: Path, every: float = 0.5) -> None:
        self.pid, self.out, self.every = pid, out, every
        self.start = time.monotonic()
        # One entry per sample: (seconds, rows, {pid: (rss MB, cpu s)}); each
        # process's role is its last one, in _roles.
        self.samples: list[tuple[float, int, dict[int, tuple[float, float]]]] = []
        self._roles: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        root = psutil.Process(self.pid)
        born, me = root.create_time(), os.getpid()
        while True:
            seen: dict[int, tuple[float, float]] = {}
            try:
                if root.status() == psutil.STATUS_ZOMBIE:
                    break
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:  # it ended
                break
            # Ray's daemons detach from the command (their parent is init), and its
            # workers are the raylet's: take every process started since the command.
            known = {p.pid for p in procs}
            for p in psutil.process_iter():
                try:
                    if p.pid not in known and p.pid != me and p.create_time() >= born:
                        procs.append(p)
                except psutil.Error:
                    continue
            for p in procs:
                try:
                    with p.oneshot():
                        cpu = p.cpu_times()
                        rss = p.memory_info().rss / 2**20
                    # vLLM's processes and Ray's workers rename themselves once
                    # started, and a Ray worker again when it takes a task.
                    known_role = self._roles.get(p.pid)
                    if known_role is None or known_role.startswith(LOOK_AGAIN):
                        found = role(p, self.pid)
                        if found != "gone" or known_role is None:  # keep what it was
                            self._roles[p.pid] = found
                    seen[p.pid] = (rss, cpu.user + cpu.system)
                except psutil.Error:
                    continue
            self.samples.append((time.monotonic() - self.start, rows_done(self.out), seen))
            time.sleep(self.every)

    def join(self) -> None:
        self._thread.join()

    def rss_by_role(self) -> list[dict[str, float]]:
        """Each sample as ``{"s", "rows", "<role> MB": RSS summed over the role}``."""
        rows: list[dict[str, float]] = []
        for s, done, seen in self.samples:
            row = {"s": round(s, 1), "rows": done}
            for pid, (rss, _) in seen.items():
                key = self._roles[pid] + " MB"
                row[key] = row.get(key, 0) + rss
            rows.append({k: round(v, 1) if k == "s" else round(v) for k, v in row.items()})
        return rows

    def first_with_rows(self, rows: int) -> float:
        """When the manifest first held ``rows`` rows (seconds from the start)."""
        return next(s for s, done, _ in self.samples if done >= rows)

    def cpu_by_role(self, begin: float, end: float) -> dict[str, float]:
        """CPU seconds each role used between ``begin`` and ``end`` (seconds from
        the start, to the sampling's precision): each process's last sample
        up to ``end`` less its last one up to ``begin`` (zero for a process
        that started after it). A process's CPU after its last sample is lost."""
        before: dict[int, float] = {}
        last: dict[int, float] = {}
        for s, _, seen in self.samples:
            if s > end + self.every:
                break
            for pid, (_, cpu) in seen.items():
                if s <= begin:
                    before[pid] = cpu
                last[pid] = cpu
        totals: dict[str, float] = {}
        for pid, cpu in last.items():
            name = self._roles[pid]  # the last role it had: vLLM and Ray rename their processes
            totals[name] = totals.get(name, 0.0) + cpu - before.get(pid, 0.0)
        return totals
