# SPDX-License-Identifier: Apache-2.0
"""Streams whose server goes silent mid-answer are resumed on another, through the
official OpenAI SDK: one stream, the text of an unbroken answer, usage counted once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import httpx
import openai
import pytest

from regions.balancer import BalancerConfig
from regions.balancer.http.silence_bound import SilenceSettings
from regions.simulator.faults import Fault, FaultMode
from regions.simulator.fleet import Fleet
from regions.simulator.openai_format import token_text

from .helpers import MODEL, stack

QUICK = BalancerConfig(silence=SilenceSettings(floor_s=0.05, prior_s=0.3))


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def answer(count: int) -> str:
    return "".join(token_text(i) for i in range(count))


async def chat(client: openai.AsyncOpenAI, tokens: int) -> tuple[str, Any, str | None]:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "tell me why"}], stream=True,
        max_tokens=tokens + 20, stream_options={"include_usage": True},
        extra_body={"x_output_tokens": tokens})
    text, usage, finish, ids = [], None, None, set()
    async for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert len(ids) == 1, f"one stream has one id, got {ids}"
    return "".join(text), usage, finish


async def completion(client: openai.AsyncOpenAI, tokens: int) -> tuple[str, Any, str | None]:
    stream = await client.completions.create(
        model=MODEL, prompt="Once upon a time", stream=True, max_tokens=tokens,
        stream_options={"include_usage": True})
    text, usage, finish = [], None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text.append(choice.text)
            finish = choice.finish_reason or finish
    return "".join(text), usage, finish


def stalled(fleet: Fleet) -> int:
    return sum(server.context.stalled for server in fleet)


@pytest.mark.parametrize("ask", [chat, completion], ids=["chat", "completions"])
async def test_streams_stalled_mid_answer_reach_the_client_whole(ask: Any) -> None:
    async with stack((1.0, 1.0, 1.0), config=QUICK) as (fleet, balancer, _):
        client = sdk(balancer.url)
        unbroken = await ask(client, 60)
        assert unbroken[0] == answer(60)
        fleet["gpu0"].set_fault(Fault(FaultMode.STALL, rate=1.0))
        fleet["gpu1"].set_fault(Fault(FaultMode.STALL, rate=0.5))
        answers = await asyncio.gather(*(ask(client, 60) for _ in range(12)))
        assert stalled(fleet) >= 3
        for text, usage, finish in answers:
            assert (text, finish) == (unbroken[0], unbroken[2])
            assert usage.completion_tokens == 60
            assert usage.prompt_tokens == unbroken[1].prompt_tokens
        resumed = balancer.metrics.resumes.labels("resumed", "")._value.get()
        assert resumed >= 3


async def test_a_stream_no_other_server_can_continue_ends_with_an_error_event() -> None:
    async with stack((1.0,), config=QUICK) as (fleet, balancer, _):
        fleet["gpu0"].set_fault(Fault(FaultMode.STALL, rate=1.0))
        with pytest.raises(openai.APIError, match="stalled and could not be resumed"):
            await chat(sdk(balancer.url), 40)
        failed = balancer.metrics.resumes.labels("failed", "no_backend")._value.get()
        assert failed == 1


async def test_resuming_can_be_turned_off() -> None:
    config = dataclasses.replace(QUICK, max_resumes=0, read_timeout_s=0.5)
    async with stack((1.0, 1.0), config=config) as (fleet, balancer, _):
        for server in fleet:
            server.set_fault(Fault(FaultMode.STALL, rate=1.0))
        with pytest.raises(httpx.RemoteProtocolError):
            await chat(sdk(balancer.url), 40)  # cut by the read timeout, as before
        assert balancer.metrics.resumes.labels("resumed", "")._value.get() == 0


async def test_at_most_max_resumes_continuations_are_sent() -> None:
    config = dataclasses.replace(QUICK, max_resumes=2)
    async with stack((1.0, 1.0, 1.0, 1.0), config=config) as (fleet, balancer, _):
        for server in fleet:
            server.set_fault(Fault(FaultMode.STALL, rate=1.0))
        with pytest.raises(openai.APIError, match="broke off 3 times"):
            await chat(sdk(balancer.url), 200)
        assert stalled(fleet) == 3  # the first stream and two continuations
        assert balancer.metrics.resumes.labels("failed", "attempts")._value.get() == 1


async def test_a_stream_whose_server_dies_mid_answer_is_continued_elsewhere() -> None:
    async with stack((1.0, 1.0), config=QUICK, time_scale=2) as (fleet, balancer, client):
        body = {"model": MODEL, "prompt": "Once", "max_tokens": 300, "stream": True}
        async with client.post("/v1/completions", json=body) as resp:
            first = await resp.content.readuntil(b"\n\n")
            fleet[resp.headers["x-director-backend"]].set_fault(Fault(FaultMode.FAIL))
            rest = await resp.read()
        events = [json.loads(e[6:]) for e in (first + rest).split(b"\n\n")
                  if e.startswith(b"data: {")]
        assert "".join(e["choices"][0]["text"] for e in events) == answer(300)
        assert len({e["id"] for e in events}) == 1 and rest.endswith(b"data: [DONE]\n\n")
        assert balancer.metrics.resumes.labels("resumed", "")._value.get() == 1
