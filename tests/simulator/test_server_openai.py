# SPDX-License-Identifier: Apache-2.0
"""Non-streaming OpenAI endpoints over real HTTP: bodies, token counts, errors, models."""

from __future__ import annotations

import pytest

from regions.simulator.openai_format import EMBEDDING_DIM, token_text

from .helpers import MODEL, completion, running_server


async def test_models_lists_what_the_server_serves() -> None:
    async with running_server() as (_, http), http.get("/v1/models") as resp:
        body = await resp.json()
    assert resp.status == 200 and body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL, "sim-lora"]
    assert all(m["object"] == "model" for m in body["data"])


async def test_completion_returns_text_and_exact_usage() -> None:
    async with (
        running_server() as (_, http),
        http.post("/v1/completions", json=completion(1234, 7)) as resp,
    ):
        body = await resp.json()
    assert resp.status == 200
    assert body["object"] == "text_completion" and body["model"] == MODEL
    assert body["id"].startswith("cmpl-")
    (choice,) = body["choices"]
    assert choice["text"] == "".join(token_text(i) for i in range(7))
    assert choice["finish_reason"] == "length" and choice["index"] == 0
    assert body["usage"] == {"prompt_tokens": 1234, "completion_tokens": 7, "total_tokens": 1241}


async def test_x_output_tokens_sets_the_length_and_finishes_with_stop() -> None:
    async with running_server() as (_, http):
        body = completion(10, 100, x_output_tokens=12)
        async with http.post("/v1/completions", json=body) as resp:
            out = await resp.json()
    assert out["usage"]["completion_tokens"] == 12
    assert out["choices"][0]["finish_reason"] == "stop"


async def test_prompt_tokens_are_estimated_at_four_characters_per_token() -> None:
    async with running_server() as (_, http):
        body = {"model": MODEL, "prompt": "a" * 401, "max_tokens": 1}
        async with http.post("/v1/completions", json=body) as resp:
            out = await resp.json()
    assert out["usage"]["prompt_tokens"] == 101


async def test_chat_completion_format() -> None:
    async with running_server() as (_, http):
        body = {
            "model": "sim-lora",
            "messages": [
                {"role": "system", "content": "x" * 40},
                {"role": "user", "content": "hi"},
            ],
            "max_tokens": 3,
            "user": "alice",
        }
        async with http.post("/v1/chat/completions", json=body) as resp:
            out = await resp.json()
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    (choice,) = out["choices"]
    assert choice["message"] == {"role": "assistant", "content": " the model answers"}
    assert out["usage"]["prompt_tokens"] == 11 + 2 * 4  # ceil(42 / 4) + template


async def test_embeddings_are_deterministic_unit_vectors() -> None:
    async with running_server() as (_, http):
        body = {"model": MODEL, "input": ["abc", "abc", "xyz"]}
        async with http.post("/v1/embeddings", json=body) as resp:
            out = await resp.json()
    assert resp.status == 200 and out["object"] == "list"
    vecs = [d["embedding"] for d in out["data"]]
    assert len(vecs) == 3 and all(len(v) == EMBEDDING_DIM for v in vecs)
    assert vecs[0] == vecs[1] != vecs[2]
    assert sum(x * x for x in vecs[2]) == pytest.approx(1.0)
    assert out["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


@pytest.mark.parametrize(
    "path", ["/v1/completions", "/v1/chat/completions", "/v1/embeddings"], ids=str
)
async def test_unknown_model_is_404_with_openai_error(path: str) -> None:
    body = {"model": "gpt-nope", "prompt": "x", "input": "x", "messages": [{"content": "x"}]}
    async with running_server() as (_, http), http.post(path, json=body) as resp:
        out = await resp.json()
    assert resp.status == 404
    assert out["error"]["code"] == "model_not_found" and out["error"]["param"] == "model"
    assert "gpt-nope" in out["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"prompt": "x"}, "model", None),
        ({"model": MODEL, "prompt": "x", "max_tokens": 0}, "max_tokens", None),
        ({"model": MODEL, "prompt": 5}, "prompt", None),
        ({"model": MODEL, "prompt": "x", "x_prompt_tokens": 16_000, "max_tokens": 1000},
         "max_tokens", "context_length_exceeded"),
    ],
    ids=["no-model", "zero-max-tokens", "bad-prompt", "too-long"],
)  # fmt: skip
async def test_bad_requests_are_400_naming_the_field(
    body: dict[str, object], param: str, code: str | None
) -> None:
    async with running_server() as (_, http), http.post("/v1/completions", json=body) as resp:
        out = await resp.json()
    assert resp.status == 400
    assert out["error"]["param"] == param and out["error"]["code"] == code


async def test_invalid_json_is_400() -> None:
    async with (
        running_server() as (_, http),
        http.post("/v1/completions", data=b"{nope") as resp,
    ):
        out = await resp.json()
    assert resp.status == 400 and out["error"]["type"] == "invalid_request_error"


async def test_health_is_200() -> None:
    async with running_server() as (_, http), http.get("/health") as resp:
        assert resp.status == 200
