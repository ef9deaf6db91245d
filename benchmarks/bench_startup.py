"""Start-up: what importing and constructing the plugin adds to an engine's start.

    python benchmarks/bench_startup.py

(a) In fresh processes that have already imported what vLLM imports before it
    loads an IO processor, the time to load the entry point and import the
    processor module (median of 5 processes).
(b) On a running engine, the time to construct the processor (median of 20).
Goal: (a) + (b) <= 0.5 s.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import llm_kwargs, model_dir, print_settings, use_cpu_engine_env

IMPORT_PROBE = r"""
import json, time
import vllm.plugins.io_processors.interface, vllm.config, vllm.renderers, vllm.outputs  # vLLM's own
start = time.perf_counter()
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="vllm.io_processor_plugins") if e.name == "bge_m3_sparse_plugin"]
qualname = ep.load()()
from vllm.utils.import_utils import resolve_obj_by_qualname
resolve_obj_by_qualname(qualname)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def main() -> None:
    use_cpu_engine_env()
    path = model_dir("small")
    print_settings(model=f"small ({path})")
    imports = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True, check=True
        )
        imports.append(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])
    t_import = statistics.median(imports)

    from vllm import LLM

    from bge_m3_sparse_plugin.serving.processor import BgeM3SparseProcessor

    llm = LLM(
        **llm_kwargs(str(path)),
    )
    plugin_io = llm.pooling_io_processors["plugin"]
    builds = []
    for _ in range(20):
        start = time.perf_counter()
        BgeM3SparseProcessor(plugin_io.vllm_config, plugin_io.renderer)
        builds.append(time.perf_counter() - start)
    t_build = statistics.median(builds)
    llm.llm_engine.engine_core.shutdown()

    print(f"entry point + import of the processor module: median {t_import * 1e3:.1f} ms")
    print(f"processor construction:                      median {t_build * 1e3:.2f} ms")
    print(f"total added to engine start: {(t_import + t_build) * 1e3:.1f} ms (goal <= 500 ms)")


if __name__ == "__main__":
    main()
