# SPDX-License-Identifier: Apache-2.0
"""First-byte hedging: a late stream gets a copy on another server, the first to answer
wins and the other is aborted; a budget caps how many copies are sent."""

from __future__ import annotations

import asyncio
import dataclasses

import openai
import pytest

from regions.balancer import BalancerConfig
from regions.balancer.http.hedging import FirstByteBound, HedgeBudget, HedgeSettings
from regions.simulator.faults import Fault, FaultMode
from regions.simulator.openai_format import token_text
from tests.run_clock import eventually

from .helpers import MODEL, stack

HEDGE = HedgeSettings(share=1.0, burst=3, floor_s=0.02, min_samples=5, window=50)


async def chat(client: openai.AsyncOpenAI) -> str:
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], stream=True,
        max_tokens=20)
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_a_hung_server_s_streams_are_answered_by_their_hedge() -> None:
    config = BalancerConfig(hedge=HEDGE)
    async with stack((1.0, 1.0), config=config) as (fleet, balancer, _):
        client = openai.AsyncOpenAI(base_url=f"{balancer.url}/v1", api_key="x", max_retries=0)
        for _ in range(8):  # the region learns its first-byte times
            await chat(client)
        fleet["gpu0"].set_fault(Fault(FaultMode.HANG))
        texts = await asyncio.gather(*(chat(client) for _ in range(6)))
        assert texts == ["".join(token_text(i) for i in range(20))] * 6
        assert balancer.metrics.hedges.labels("won")._value.get() >= 1
        engine = fleet["gpu0"].engine
        await eventually(lambda: engine.state().running + engine.state().waiting == 0)


async def test_hedges_stay_within_the_budget() -> None:
    config = BalancerConfig(hedge=dataclasses.replace(HEDGE, share=0.1, burst=1))
    async with stack((1.0, 1.0), config=config) as (fleet, balancer, _):
        client = openai.AsyncOpenAI(base_url=f"{balancer.url}/v1", api_key="x", max_retries=0)
        for _ in range(8):
            await chat(client)
        fleet["gpu0"].set_fault(Fault(FaultMode.LATE, factor=30))
        await asyncio.gather(*(chat(client) for _ in range(20)))
        sent = sum(balancer.metrics.hedges.labels(o)._value.get()
                   for o in ("won", "lost", "failed"))
        assert 1 <= sent <= 1 + 0.1 * 28
        assert balancer.metrics.hedges.labels("budget")._value.get() >= 1


def test_the_budget_earns_a_share_of_a_hedge_per_request() -> None:
    budget = HedgeBudget(share=0.05, burst=2)
    spent = 0
    for _ in range(1000):
        budget.earn()
        spent += budget.spend()
    assert 50 <= spent <= 52


def test_the_bound_is_a_quantile_of_first_bytes_by_prompt_size() -> None:
    bound = FirstByteBound(HedgeSettings(share=0.05, min_samples=10, window=200))
    assert bound.seconds(100) is None
    for i in range(100):
        bound.observe(100, 0.1 + i / 1000)  # 0.100 .. 0.199 s
        bound.observe(5000, 1.0 + i / 100)  # long prompts: 1 .. 1.99 s
    assert bound.seconds(100) == pytest.approx(0.19)
    assert bound.seconds(5000) == pytest.approx(1.9)
    assert bound.seconds(20) == pytest.approx(1.8, abs=0.05)  # no class of its own: all
