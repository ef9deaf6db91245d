"""Index a corpus: rows in, BGE-M3 sparse (and dense) vectors out, in Parquet shards.

``bge-m3-sparse index`` (``_command.py``) is the command; ``_job.py`` the one
resumable writer loop, fed by a backend (``_local.py`` on one machine,
``_ray.py`` on Ray Data); ``_reader.py`` the inputs; ``_output.py`` the
shards, manifest and error log (the format below); ``_sinks.py`` the vector
databases; ``_engine.py`` the vLLM engine with the plugin; ``_types.py`` the
values they pass one another; ``_model_info.py`` the model's sizes and
whether a GPU is here, before any engine starts.
"""

from ._output import ERRORS, FORMAT_VERSION, MANIFEST

__all__ = ["ERRORS", "FORMAT_VERSION", "MANIFEST"]
