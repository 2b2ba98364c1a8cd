# SPDX-License-Identifier: Apache-2.0
"""SSE streaming in OpenAI's chunk format, incremental delivery, and client disconnects."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from regions.simulator.openai_format import token_text

from .helpers import MODEL, completion, eventually, running_server


async def read_events(resp: aiohttp.ClientResponse) -> list[str]:
    """The ``data:`` payloads of an SSE stream, checking the ``data: ...\\n\\n`` framing."""
    raw = (await resp.read()).decode()
    assert raw.endswith("\n\n")
    events = raw[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    return [e.removeprefix("data: ") for e in events]


async def sim_state(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get("/_sim/state") as resp:
        return await resp.json()


async def test_completion_stream_has_one_chunk_per_token_then_done() -> None:
    async with (
        running_server() as (_, http),
        http.post("/v1/completions", json=completion(50, 6, stream=True)) as resp,
    ):
        assert resp.headers["Content-Type"] == "text/event-stream"
        events = await read_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 6
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("cmpl-")
    assert all(c["object"] == "text_completion" and c["model"] == MODEL for c in chunks)
    assert [c["choices"][0]["text"] for c in chunks] == [token_text(i) for i in range(6)]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["length"]


async def test_chat_stream_opens_with_the_role_and_can_end_with_usage() -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "x_prompt_tokens": 77,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with (
        running_server() as (_, http),
        http.post("/v1/chat/completions", json=body) as resp,
    ):
        events = await read_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    role, *tokens, usage = chunks
    assert role["object"] == "chat.completion.chunk"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [t["choices"][0]["delta"] for t in tokens] == [
        {"content": token_text(i)} for i in range(4)
    ]
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 77, "completion_tokens": 4, "total_tokens": 81}


async def test_chunks_arrive_while_the_sequence_is_still_generating() -> None:
    async with (
        running_server() as (_, http),
        http.post("/v1/completions", json=completion(10, 5000, stream=True)) as resp,
    ):
        first = await resp.content.readuntil(b"\n\n")
        assert json.loads(first.removeprefix(b"data: "))["choices"][0]["text"]
        state = await sim_state(http)
        assert state["running"] == 1 and state["counters"]["generation_tokens"] < 5000


async def test_disconnect_mid_stream_frees_the_slot_and_kv() -> None:
    async with running_server(max_num_seqs=1) as (_, http):
        resp = await http.post("/v1/completions", json=completion(500, 10_000, stream=True))
        assert resp.status == 200
        for _ in range(3):
            await resp.content.readuntil(b"\n\n")
        assert (await sim_state(http))["kv_used_tokens"] > 500
        resp.close()

        async def freed() -> bool:
            s = await sim_state(http)
            return s["running"] == 0 and s["kv_used_tokens"] == 0 and s["counters"]["aborted"]

        await eventually(freed)
        async with http.post("/v1/completions", json=completion(10, 3)) as after:
            assert after.status == 200


async def test_disconnect_while_queued_leaves_the_queue() -> None:
    async with running_server(max_num_seqs=1) as (_, http):
        hog = await http.post("/v1/completions", json=completion(10, 10_000, stream=True))
        assert hog.status == 200
        await hog.content.readuntil(b"\n\n")
        queued = asyncio.create_task(http.post("/v1/completions", json=completion(10, 5)))

        async def waiting(n: int) -> bool:
            return (await sim_state(http))["waiting"] == n

        await eventually(lambda: waiting(1))
        queued.cancel()
        await eventually(lambda: waiting(0))
        state = await sim_state(http)
        assert state["running"] == 1 and state["counters"]["aborted"] == 1
        hog.close()


async def test_many_aborted_streams_leave_nothing_behind() -> None:
    async with running_server(max_num_seqs=4) as (server, http):
        for _ in range(5):
            streams = [
                await http.post("/v1/completions", json=completion(100, 5000, stream=True))
                for _ in range(10)
            ]
            for resp in streams:
                resp.close()

        async def drained() -> bool:
            s = server.engine.state()
            return s.running == s.waiting == s.kv_used_tokens == 0

        await eventually(drained)
        assert server.engine.state().counters.aborted == 50
