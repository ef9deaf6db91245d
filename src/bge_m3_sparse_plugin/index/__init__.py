"""Index a corpus: rows in, BGE-M3 sparse (and dense) vectors out, in Parquet shards.

``bge-m3-sparse index`` (``index/command.py``) is the command; ``job.py`` the
resumable loop; ``reader.py`` the inputs; ``output.py`` the shards, manifest
and error log; ``engine.py`` the vLLM engine with the plugin.
"""
