"""A real Ray cluster of two nodes on this machine, started and stopped by PID.

``ray start --head`` and ``ray start --address`` each start a raylet (two
nodes to Ray, one CPU each), in a temporary folder of their own. Stopping
kills exactly the processes of that folder and their children (the replicas,
their vLLM engines), never ``ray stop``, which ends every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bge_m3_sparse_plugin._config import CORE_SLOTS_ENV, DEFAULT_CORE_SLOTS

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TwoNodeCluster:
    def __init__(self) -> None:
        # Short: Ray's Unix socket paths live under it.
        self.folder = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
        self.home = self.folder / "home"
        self.home.mkdir()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # The command and `ray start` share a home (Ray's auth token) and no RAY_* of the shell.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.env["HOME"] = str(self.home)
        # Its replicas claim cores under a name of their own: another index
        # job on this machine (another test run, a user's) holds its own.
        self.env[CORE_SLOTS_ENV] = f"{DEFAULT_CORE_SLOTS}-{self.folder.name}"

    def start(self) -> None:
        common = ["--num-cpus=1", "--disable-usage-stats"]
        self._ray(
            "start",
            "--head",
            f"--port={self.port}",
            f"--ray-client-server-port={free_port()}",
            "--include-dashboard=false",
            f"--temp-dir={self.folder / 't'}",
            *common,
        )
        self._ray("start", f"--address={self.address}", *common)
        self.wait_for_nodes(2)

    def _ray(self, *args: str) -> None:
        result = subprocess.run(
            [RAY, *args], env=self.env, capture_output=True, text=True, timeout=180
        )
        if result.returncode:
            raise RuntimeError(
                f"ray {' '.join(args)}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
            )

    def alive_nodes(self) -> list[dict]:
        script = (
            f"import json, ray; ray.init(address={self.address!r}, log_to_driver=False); "
            "print(json.dumps([n for n in ray.nodes() if n['Alive']]))"
        )
        result = subprocess.run(
            [sys.executable, "-c", script],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        import json

        return json.loads(result.stdout.strip().splitlines()[-1])

    def wait_for_nodes(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(nodes := self.alive_nodes()) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(nodes)} Ray nodes alive, not {n}")
            time.sleep(1)

    def own_processes(self) -> list[psutil.Process]:
        """The cluster's daemons (their command lines name its folder) and all
        their descendants (workers rename themselves ray::...)."""
        roots = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if str(self.folder) in " ".join(proc.info["cmdline"] or []):
                    roots.append(proc)
            except psutil.Error:
                continue
        found = {p.pid: p for p in roots}
        for root in roots:
            try:
                found.update({c.pid: c for c in root.children(recursive=True)})
            except psutil.Error:
                continue
        return list(found.values())

    def replicas(self) -> list[psutil.Process]:
        """The Ray actors that hold a replica (not their vLLM engine processes)."""
        out = []
        for proc in self.own_processes():
            try:
                title = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            if title.startswith("ray::") and "Replica" in title:
                out.append(proc)
        return out

    def stop(self) -> None:
        procs = self.own_processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(procs, timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)
