"""How the client reads error answers that a healthy vLLM server rarely gives (no engine)."""

from __future__ import annotations

import httpx
import pytest

from bge_m3_sparse_plugin.client import SparseEmbeddingClient, SparseEmbeddingError


def client_answering(status: int, **response) -> SparseEmbeddingClient:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, **response))
    return SparseEmbeddingClient(
        "http://plugin.test", http_client=httpx.Client(transport=transport)
    )


def test_a_5xx_carries_the_servers_message():
    error = {
        "error": {
            "message": "EngineCore died",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    with pytest.raises(SparseEmbeddingError) as info:
        client_answering(500, json=error).embed("x")
    assert info.value.status_code == 500
    assert info.value.message == "EngineCore died"
    assert str(info.value) == "HTTP 500: EngineCore died"
    assert info.value.body == error


def test_a_non_json_error_keeps_its_text():
    with pytest.raises(SparseEmbeddingError, match="HTTP 502: upstream went away"):
        client_answering(502, text="upstream went away").embed("x")


def test_a_200_that_is_not_a_plugin_response_is_an_error():
    with pytest.raises(SparseEmbeddingError, match="not a plugin response"):
        client_answering(200, json={"object": "list", "data": []}).embed("x")


def test_embed_options_name_every_request_field():
    # EmbedOptions repeats the schema's fields for typing; this keeps the two in step.
    from bge_m3_sparse_plugin.client import EmbedOptions
    from bge_m3_sparse_plugin.schemas import SparseEmbeddingRequest

    request_fields = set(SparseEmbeddingRequest.model_fields) - {"input"}
    assert set(EmbedOptions.__annotations__) == request_fields | {
        "truncate_prompt_tokens",
        "request_id",
    }
