"""pymilvus-model's ``BGEM3EmbeddingFunction`` (0.3), backed by vLLM: code
written for it runs with one line changed::

    # from pymilvus.model.hybrid import BGEM3EmbeddingFunction
    from bge_m3_sparse_plugin.integrations.milvus import BGEM3EmbeddingFunction

    ef = BGEM3EmbeddingFunction(model_name="BAAI/bge-m3", device="cpu", use_fp16=False)
    docs = ef.encode_documents(["Artificial intelligence was founded in 1956."])
    docs["dense"][0], docs["sparse"][[0]]  # a numpy vector, one row of a scipy csr_array

As pymilvus-model's, it wraps ``BGEM3FlagModel``: here the drop-in of
``integrations.flagembedding``, which takes the rest of the keywords
(``base_url=`` and ``api_key=`` for a running server, ``vllm.LLM``'s
keywords for the engine in this process). The results are pymilvus-model's:
``dense`` a list of numpy vectors, ``sparse`` one scipy ``csr_array`` of
(texts, vocabulary) float64 weights, ``colbert_vecs`` a list of arrays.
Needs scipy (pymilvus-model's own dependency; vLLM brings it too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .flagembedding import BGEM3FlagModel

__all__ = ["BGEM3EmbeddingFunction", "sparse_rows"]


def sparse_rows(lexical_weights: list[dict[str, Any]], vocabulary: int) -> Any:
    """FlagEmbedding's lexical-weight dicts as pymilvus-model returns them:
    one scipy ``csr_array`` of shape (len(lexical_weights), ``vocabulary``),
    float64, each row's entries those of its dict."""
    from scipy.sparse import csr_array

    rows = np.repeat(np.arange(len(lexical_weights)), [len(lw) for lw in lexical_weights])
    cols = np.array([int(key) for lw in lexical_weights for key in lw], dtype=np.int64)
    values = np.array([float(v) for lw in lexical_weights for v in lw.values()], dtype=np.float64)
    return csr_array((values, (rows, cols)), shape=(len(lexical_weights), vocabulary)).tocsr()


class BGEM3EmbeddingFunction:
    """``pymilvus.model.hybrid.BGEM3EmbeddingFunction``, on vLLM with the plugin."""

    def __init__(
        self,
        model_name: str = "BAAI/bge-m3",
        batch_size: int = 16,
        device: str | None = None,
        normalize_embeddings: bool = True,
        use_fp16: bool = False,
        return_dense: bool = True,
        return_sparse: bool = True,
        return_colbert_vecs: bool = False,
        **kwargs: Any,
    ) -> None:
        self.model_name = model_name
        self.batch_size = batch_size
        self.normalize_embeddings = normalize_embeddings
        self.device = device
        self.use_fp16 = use_fp16
        devices = kwargs.pop("devices", device)  # pymilvus-model's own override
        self._encode_config: dict[str, Any] = {
            "batch_size": batch_size,
            "return_dense": return_dense,
            "return_sparse": return_sparse,
            "return_colbert_vecs": return_colbert_vecs,
        }
        self.model = BGEM3FlagModel(
            model_name,
            devices=devices,
            normalize_embeddings=normalize_embeddings,
            use_fp16=use_fp16,
            **kwargs,
        )

    @property
    def dim(self) -> dict[str, int]:
        """The sizes of the three outputs: dense and ColBERT vectors (the model's
        hidden size), and the sparse vectors (the tokenizer's vocabulary)."""
        return {
            "dense": self.model.hidden_size,
            "colbert_vecs": self.model.hidden_size,
            "sparse": len(self.model.tokenizer),
        }

    def _encode(self, texts: list[str]) -> dict[str, Any]:
        output = self.model.encode(texts, **self._encode_config)
        result: dict[str, Any] = {}
        if self._encode_config["return_dense"]:
            result["dense"] = list(output["dense_vecs"])
        if self._encode_config["return_sparse"]:
            result["sparse"] = sparse_rows(output["lexical_weights"], self.dim["sparse"])
        if self._encode_config["return_colbert_vecs"]:
            result["colbert_vecs"] = output["colbert_vecs"]
        return result

    def __call__(self, texts: list[str]) -> dict[str, Any]:
        return self._encode(texts)

    def encode_queries(self, queries: list[str]) -> dict[str, Any]:
        """As pymilvus-model's: queries are encoded as documents are."""
        return self._encode(queries)

    def encode_documents(self, documents: list[str]) -> dict[str, Any]:
        return self._encode(documents)

    def close(self) -> None:
        """Stop the engine (or close the client)."""
        self.model.close()

    def __enter__(self) -> BGEM3EmbeddingFunction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
