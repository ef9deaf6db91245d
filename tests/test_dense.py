"""Dense vectors beside sparse: what /v1/embeddings answers on a plugin server,
and the two ways that work (the plugin's return_dense, a second server)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient, SparseEmbeddingError

from .support.server import API_KEY, SERVED_MODEL_NAME

pytestmark = pytest.mark.engine

TEXTS = ["I love China", "hi, bge-m3", "China is a large country"]


def test_v1_embeddings_on_the_plugin_server_is_a_501(server):
    """vLLM serves one pooling task per server; the plugin's (embed&token_classify)
    is not 'embed', so vLLM builds no Embeddings API handler."""
    resp = httpx.post(
        server.url + "/v1/embeddings", json={"model": SERVED_MODEL_NAME, "input": TEXTS}, timeout=60
    )
    assert resp.status_code == 501
    assert resp.json() == {
        "error": {
            "message": "The model does not support Embeddings API",
            "type": "NotImplementedError",
            "param": None,
            "code": 501,
        }
    }


def test_a_second_server_of_the_embed_task_gives_the_plugins_dense_vectors(server, embed_server):
    resp = httpx.post(
        embed_server.url + "/v1/embeddings",
        json={"model": SERVED_MODEL_NAME, "input": TEXTS},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    openai_style = [item["embedding"] for item in resp.json()["data"]]
    with SparseEmbeddingClient(server.url) as client:
        plugin = client.embed_dense(TEXTS)
    assert len(openai_style) == len(plugin) == len(TEXTS)
    np.testing.assert_allclose(np.array(openai_style), np.array(plugin), rtol=1e-5, atol=1e-6)
    assert all(abs(np.linalg.norm(v) - 1) < 1e-5 for v in plugin)  # normalised, as FlagEmbedding's


def test_the_embed_task_server_refuses_sparse_but_gives_dense_on_pooling(embed_server, server):
    with SparseEmbeddingClient(embed_server.url, api_key=API_KEY) as client:
        with pytest.raises(SparseEmbeddingError) as info:
            client.embed(TEXTS[0])
        dense = client.embed_dense(TEXTS)
    assert info.value.status_code == 400
    assert info.value.param == "data.return_sparse"
    assert "runs the 'embed' pooling task, which does not give it" in str(info.value)
    with SparseEmbeddingClient(server.url) as client:
        np.testing.assert_allclose(
            np.array(dense), np.array(client.embed_dense(TEXTS)), rtol=1e-5, atol=1e-6
        )
