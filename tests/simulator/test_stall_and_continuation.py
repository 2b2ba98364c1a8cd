# SPDX-License-Identifier: Apache-2.0
"""The ``stall`` fault (a stream silent mid-answer) and continuations: a resumed request
streams exactly the rest of the answer an unbroken one would have."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest

from regions.simulator.openai_format import generated_suffix_tokens, generated_tokens, token_text

from .helpers import MODEL, completion, running_server
from .test_server_faults import set_fault, sim_state


async def events(resp: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    out = []
    async for line in resp.content:
        if line.startswith(b"data: {"):
            out.append(json.loads(line[6:]))
    return out


def text_of(chunks: list[dict[str, Any]]) -> str:
    parts = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            parts.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(parts)


def chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, **extra}


def answer(first: int, count: int) -> str:
    return "".join(token_text(first + i) for i in range(count))


def test_generated_text_is_recognised_only_from_its_first_token() -> None:
    assert generated_tokens(answer(0, 12)) == 12
    assert generated_tokens(answer(1, 3)) == 0  # not the start of an answer
    assert generated_tokens("an answer the client wrote") == 0
    assert generated_suffix_tokens("Question: why?" + answer(0, 20)) == 20
    assert generated_suffix_tokens(["Q:" + answer(0, 3)]) == 3
    assert generated_suffix_tokens("nothing generated here") == 0
    assert generated_suffix_tokens([1, 2, 3]) == 0


async def test_stall_silences_a_stream_mid_answer_and_frees_its_slot() -> None:
    async with running_server() as (_, http):
        await set_fault(http, mode="stall", rate=1.0)
        resp = await http.post("/v1/completions", json=completion(10, 40, stream=True))
        got = 0
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):  # 25 model seconds: the whole answer is 0.5 s
                async for line in resp.content:
                    got += line.startswith(b"data: {")
        assert 1 <= got < 40
        state = await sim_state(http)
        assert state["stalled_streams"] == 1 and state["running"] == 0
        resp.close()


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_a_continuation_streams_exactly_the_rest_of_the_answer(endpoint: str) -> None:
    async with running_server() as (_, http):
        if endpoint == "chat":
            question = [{"role": "user", "content": "why?"}]
            whole = chat(question, max_tokens=30, x_output_tokens=25, stream=True,
                         stream_options={"include_usage": True})
            rest = chat([*question, {"role": "assistant", "content": answer(0, 11)}],
                        max_tokens=19, x_output_tokens=25, stream=True,
                        continue_final_message=True, add_generation_prompt=False,
                        stream_options={"include_usage": True})
            path = "/v1/chat/completions"
        else:
            whole = completion(50, 30, x_output_tokens=25, stream=True,
                               stream_options={"include_usage": True})
            rest = {**whole, "prompt": whole["prompt"] + answer(0, 11), "max_tokens": 19}
            path = "/v1/completions"
        async with http.post(path, json=whole) as resp:
            unbroken = await events(resp)
        async with http.post(path, json=rest) as resp:
            continued = await events(resp)
        assert text_of(continued) == answer(11, 14)
        assert answer(0, 11) + text_of(continued) == text_of(unbroken)
        finish = [c["choices"][0]["finish_reason"] for c in continued if c["choices"]]
        assert finish[-1] == "stop" == [c["choices"][0]["finish_reason"]
                                        for c in unbroken if c["choices"]][-1]
        before, after = unbroken[-1]["usage"], continued[-1]["usage"]
        assert after["completion_tokens"] == 14
        assert after["prompt_tokens"] == before["prompt_tokens"] + 11


async def test_continuing_with_the_generation_prompt_too_is_refused_as_vllm_does() -> None:
    async with running_server() as (_, http):
        body = chat([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}],
                    continue_final_message=True)
        async with http.post("/v1/chat/completions", json=body) as resp:
            assert resp.status == 400
            assert "add_generation_prompt" in (await resp.json())["error"]["message"]


async def test_late_holds_the_first_token_back_then_streams_as_usual() -> None:
    """At 50 model seconds a wall second: the 4,000-token prompt's first token comes after
    5 ms, 200 ms when 40 times late; the 199 tokens after it take ~50 ms, or less when late
    (the engine went on generating behind the held token); a rest slowed as well would
    take ~2 s. Margins of a hundred milliseconds: a busy machine pauses the test process
    for tens of them."""
    async with running_server() as (_, http):
        async def first_and_rest() -> tuple[float, float]:
            start = time.monotonic()
            async with http.post("/v1/completions",
                                 json=completion(4000, 200, stream=True)) as resp:
                await resp.content.readuntil(b"\n\n")
                first = time.monotonic()
                await resp.read()
                return first - start, time.monotonic() - first

        natural = await first_and_rest()
        await set_fault(http, mode="late", factor=40)
        late = await first_and_rest()
        assert late[0] > 0.15 and late[0] > 3 * natural[0], (natural, late)
        assert late[1] < 3 * natural[1] + 0.1, (natural, late)
