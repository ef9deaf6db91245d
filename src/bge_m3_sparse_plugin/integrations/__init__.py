"""Adapters for the frameworks people build retrieval in, over the typed client.

Each module imports its framework when it is imported, and comes with its own
extra: ``langchain`` (``[langchain]``: langchain-qdrant and langchain-milvus),
``llamaindex`` (``[llamaindex]``), ``haystack`` (``[haystack]``). ``remote``
is what they share: a plugin server, texts in, sparse (and dense) vectors out.
"""
