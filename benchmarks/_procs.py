"""What each process of a run uses, sampled from outside: RSS and CPU seconds, by role.

A role names what a process is for: the command itself, vLLM's engine core
and model worker, and Ray's daemons, idle workers, read tasks and replica
actors. Processes that come and go (Ray's task workers) are summed by role.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from pathlib import Path

import psutil

from bge_m3_sparse_plugin.index._output import MANIFEST

__all__ = ["ProcessWatch", "role", "rows_done"]


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
        return "Ray tasks (read, split)"
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
    ``pid``: its role, RSS and CPU seconds (user + system), with the rows
    recorded in ``out`` so far. Stops when that process ends."""

    def __init__(self, pid: int, out: Path, every: float = 0.5) -> None:
        self.pid, self.out, self.every = pid, out, every
        self.start = time.monotonic()
        # One entry per sample: (seconds, rows, {pid: (role, rss MB, cpu s)}).
        self.samples: list[tuple[float, int, dict[int, tuple[str, float, float]]]] = []
        self._roles: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        root = psutil.Process(self.pid)
        while True:
            seen: dict[int, tuple[str, float, float]] = {}
            try:
                if root.status() == psutil.STATUS_ZOMBIE:
                    break
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:  # it ended
                break
            for p in procs:
                try:
                    with p.oneshot():
                        cpu = p.cpu_times()
                        rss = p.memory_info().rss / 2**20
                    # A Ray worker renames itself when it takes a task: look again until it has.
                    if self._roles.get(p.pid) in (None, "Ray idle workers", "gone"):
                        self._roles[p.pid] = role(p, self.pid)
                    seen[p.pid] = (self._roles[p.pid], rss, cpu.user + cpu.system)
                except psutil.Error:
                    continue
            self.samples.append((time.monotonic() - self.start, rows_done(self.out), seen))
            time.sleep(self.every)

    def join(self) -> None:
        self._thread.join()

    def rss_by_role(self, index: int) -> dict[str, float]:
        """Each role's RSS (MB, its processes summed) at sample ``index``."""
        totals: dict[str, float] = {}
        for name, rss, _ in self.samples[index][2].values():
            totals[name] = totals.get(name, 0.0) + rss
        return totals

    def first_with_rows(self, rows: int) -> float:
        """When the manifest first held ``rows`` rows (seconds from the start)."""
        return next(s for s, done, _ in self.samples if done >= rows)

    def cpu_by_role(self, begin: float, end: float) -> dict[str, float]:
        """CPU seconds each role used between ``begin`` and ``end`` (seconds from
        the start, taken at the nearest samples); a process that started
        within the window counts from zero."""
        times = [s for s, _, _ in self.samples]
        first = self.samples[max(0, bisect.bisect_left(times, begin) - 1)][2]
        last = self.samples[min(len(times) - 1, bisect.bisect_left(times, end))][2]
        totals: dict[str, float] = {}
        for pid, (name, _, cpu) in last.items():
            before = first[pid][2] if pid in first else 0.0
            totals[name] = totals.get(name, 0.0) + cpu - before
        return totals
