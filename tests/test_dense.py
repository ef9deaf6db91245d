"""Dense vectors beside sparse: what /v1/embeddings answers on a plugin server
started without a pooling task (501), and the server started with
--pooler-config '{"task": "embed"}', which answers OpenAI's /v1/embeddings (the
OpenAI client, curl) and the plugin's /pooling (sparse, dense, ColBERT) both."""

from __future__ import annotations

import json
import subprocess

import httpx
import numpy as np
import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient

from .support.parity import ATOL, RTOL, assert_items_equal_flag, flag_all
from .support.requests import post
from .support.server import API_KEY, SERVED_MODEL_NAME

pytestmark = pytest.mark.engine

TEXTS = ["I love China", "hi, bge-m3", "China is a large country"]


def test_v1_embeddings_on_a_server_of_another_task_is_a_501(token_classify_server):
    """vLLM 0.32 builds its Embeddings API only on a server whose pooling task
    is 'embed' (init_pooling_io_processors); a server started without one
    has no handler."""
    resp = httpx.post(
        token_classify_server.url + "/v1/embeddings",
        json={"model": SERVED_MODEL_NAME, "input": TEXTS},
        timeout=60,
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


def test_the_embed_server_answers_openais_client_with_flagembeddings_dense(
    embed_server, server, flag_model
):
    from openai import OpenAI

    openai = OpenAI(base_url=embed_server.url + "/v1", api_key=API_KEY)
    got = openai.embeddings.create(model=SERVED_MODEL_NAME, input=TEXTS)
    openai_style = [item.embedding for item in got.data]
    flag = flag_model.encode(TEXTS, return_dense=True, return_sparse=False, max_length=1024)
    assert [item.index for item in got.data] == list(range(len(TEXTS)))
    np.testing.assert_allclose(np.array(openai_style), flag["dense_vecs"], rtol=RTOL, atol=ATOL)
    # The plugin's own dense vectors, on the default server, are the same.
    with SparseEmbeddingClient(server.url) as client:
        np.testing.assert_allclose(
            np.array(openai_style), np.array(client.embed_dense(TEXTS)), rtol=RTOL, atol=ATOL
        )


def test_the_embed_server_answers_curl_on_v1_embeddings(embed_server, flag_model):
    body = json.dumps({"model": SERVED_MODEL_NAME, "input": TEXTS[0]})
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--fail-with-body",
            embed_server.url + "/v1/embeddings",
            "-H",
            "Content-Type: application/json",
            "-H",
            f"Authorization: Bearer {API_KEY}",
            "-d",
            body,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (item,) = json.loads(out.stdout)["data"]
    flag = flag_model.encode([TEXTS[0]], return_dense=True, return_sparse=False)
    np.testing.assert_allclose(item["embedding"], flag["dense_vecs"][0], rtol=RTOL, atol=ATOL)


def test_the_embed_server_answers_the_plugins_pooling_with_all_three(embed_server, flag_model):
    data = {"input": TEXTS, "return_dense": True, "return_colbert_vecs": True}
    resp = post(
        embed_server,
        {"model": SERVED_MODEL_NAME, "data": data},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert resp.status_code == 200, resp.text
    assert_items_equal_flag(resp.json()["data"]["data"], data, flag_all(flag_model, TEXTS), "embed")
