# SPDX-License-Identifier: Apache-2.0
"""The balancer learns each backend's capacity from the backend, over real HTTP: simulated
vLLM, SGLang and TGI servers of 16, 64 and 256 slots, a backend restarted with another
limit, and the policy's ``max-seqs`` pin. Capacity shows in ``/_admin/state``, ``/metrics``
and ``explain``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from policies import load_policy_text
from regions.balancer import BackendSpec, Balancer, BalancerConfig, build_balancer
from regions.balancer.scheduling.capacity import UNBOUNDED, CapacityConfig
from regions.simulator import Fleet, ServerSpec
from regions.simulator.config import EngineConfig
from tests.balancer.helpers import MODEL, admin_client, completion
from tests.run_clock import RunClock, eventually

LEARN_WITHIN_S = 10.0


def spec(name: str, slots: int, engine: str, port: int = 0) -> ServerSpec:
    return ServerSpec(name, port=port, models=(MODEL,), engine_name=engine,
                      engine=EngineConfig(max_num_seqs=slots, kv_cache_tokens=slots * 4096))


@asynccontextmanager
async def behind(server: ServerSpec, *, time_scale: float = 1.0, late_binding: bool = False,
                 provisional: bool = False
                 ) -> AsyncIterator[tuple[Fleet, Balancer, aiohttp.ClientSession]]:
    async with Fleet([server], time_scale=time_scale) as fleet:
        backend = BackendSpec(server.name, fleet[server.name].url, (MODEL,), None, None)
        config = BalancerConfig(capacity=CapacityConfig(late_binding=late_binding,
                                                        provisional=provisional))
        balancer = build_balancer("test-region", [backend], config)
        async with balancer, client_of(balancer) as client:
            yield fleet, balancer, client


def client_of(balancer: Balancer) -> aiohttp.ClientSession:
    """A client without aiohttp's default cap of 100 connections."""
    return aiohttp.ClientSession(base_url=balancer.url,
                                 connector=aiohttp.TCPConnector(limit=0))


async def flood(client: aiohttp.ClientSession, count: int) -> list[asyncio.Task]:
    """``count`` long non-streamed requests (nothing crosses the proxy until they end)."""
    body = completion(4000, stream=False)
    return [asyncio.create_task(client.post("/v1/completions", json=body))
            for _ in range(count)]


async def cancel(tasks: list[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.parametrize("slots", [16, 64, 256])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
async def test_capacity_is_learned_within_seconds(engine: str, slots: int) -> None:
    """With late binding on, so that the learned capacity is also the limit."""
    async with RunClock() as clock, behind(spec("gpu", slots, engine), late_binding=True) as (
            fleet, balancer, client):
        backend = balancer.pool["gpu"]
        started = clock()
        tasks = await flood(client, slots + 24)
        try:
            if engine == "tgi" and slots > 128:
                # TGI's router accepts 128 at once (its /info): the balancer never sends more
                # (no 429), and the batch never fills, so its slots stay unknown
                await eventually(lambda: backend.cap_now.limit == 128, timeout=LEARN_WITHIN_S)
                await asyncio.sleep(1.5)
                state = fleet["gpu"].engine.state()
                assert state.running + state.waiting <= 128
                assert backend.cap_now.slots is None
            else:
                await eventually(lambda: backend.cap_now.slots == slots, timeout=LEARN_WITHIN_S)
                assert clock() - started <= LEARN_WITHIN_S
                expected = "engine" if engine == "sglang" else "observed"
                assert backend.cap_now.source in (expected, "observed")
                await eventually(lambda: fleet["gpu"].engine.state().running == slots)
                before, slots = backend.in_flight, backend.cap_now.slots
                # the limit is the capacity, one more while probing (a second in ten)
                held = 30 - max(0, slots + 1 - before)
                tasks += await flood(client, 30)  # after learning, beyond the limit: held
                await eventually(lambda: balancer.dispatcher.queued >= held)
                assert backend.in_flight <= max(before, slots + 1)
        finally:
            await cancel(tasks)


async def test_a_burst_before_the_capacity_is_known_waits_in_the_region_queue() -> None:
    """A vLLM server publishes no slot count and, at light load, is never seen saturated. A
    balancer holding as for tenants gives it a provisional limit from what it was seen
    running, grows it (scraping sooner) while the engine runs all of it, and learns the
    capacity from the burst that overfills it by the last step's margin, not by the burst:
    the rest of the burst waits in the region queue, where the fair share orders it."""
    async with behind(spec("gpu", 32, "vllm"), late_binding=True, provisional=True) as (
            fleet, balancer, client):
        backend = balancer.pool["gpu"]
        engine = fleet["gpu"].engine
        tasks = await flood(client, 8)
        try:
            await eventually(lambda: backend.cap_now.provisional, timeout=LEARN_WITHIN_S)
            assert (backend.cap_now.slots, backend.cap_now.limit) == (None, 10)
            async with admin_client(balancer) as adm, adm.get("/_admin/state") as resp:
                shown = (await resp.json())["backends"][0]["capacity"]
            assert shown == {"slots": None, "source": "unknown", "limit": 10,
                             "provisional": True}
            tasks += await flood(client, 60)
            most_at_engine = most_queued = 0
            clock = RunClock(0.01)
            deadline = clock() + LEARN_WITHIN_S
            while backend.cap_now.slots is None and clock() < deadline:
                state = engine.state()
                most_at_engine = max(most_at_engine, state.running + state.waiting)
                most_queued = max(most_queued, balancer.dispatcher.queued)
                await asyncio.sleep(0.01)
            assert (backend.cap_now.slots, backend.cap_now.source) == (32, "observed")
            assert most_at_engine <= 40  # limits 10, 20, 40; unbounded: all 68
            assert most_queued >= 68 - 40
            assert balancer.dispatcher.queued >= 68 - 40  # held now at the capacity
        finally:
            await cancel(tasks)


async def test_by_default_a_learned_capacity_holds_nothing() -> None:
    """Without late binding the capacity is learned and shown, and requests beyond it go to
    the server's own queue, as least-outstanding-requests sends them."""
    async with behind(spec("gpu", 16, "vllm")) as (fleet, balancer, client):
        backend = balancer.pool["gpu"]
        tasks = await flood(client, 40)
        try:
            await eventually(lambda: backend.cap_now.slots == 16, timeout=LEARN_WITHIN_S)
            assert backend.cap_now.limit == UNBOUNDED
            await eventually(lambda: fleet["gpu"].engine.state().waiting == 24)
            assert balancer.dispatcher.queued == 0 and backend.in_flight == 40
        finally:
            await cancel(tasks)


async def test_sglang_says_its_slots_before_any_load() -> None:
    async with behind(spec("gpu", 48, "sglang")) as (_, balancer, _client):
        backend = balancer.pool["gpu"]
        await eventually(lambda: backend.cap_now.slots == 48, timeout=LEARN_WITHIN_S)
        assert backend.cap_now.source == "engine"


async def test_nothing_is_held_while_the_capacity_is_unknown() -> None:
    """A server with no metrics at all: the balancer sends everything (least outstanding),
    never queues a request in front of it."""
    async with behind(spec("gpu", 8, "vllm")) as (fleet, balancer, client):
        fleet["gpu"].app.router._resources = [  # its /metrics disappears
            r for r in fleet["gpu"].app.router._resources if r.canonical != "/metrics"]
        backend = balancer.pool["gpu"]
        tasks = await flood(client, 40)
        try:
            await eventually(lambda: fleet["gpu"].engine.state().waiting == 32)
            assert balancer.dispatcher.queued == 0 and backend.cap_now.slots is None
            assert backend.in_flight == 40
        finally:
            await cancel(tasks)


async def test_a_backend_restarted_with_another_limit_is_learned_again() -> None:
    """Its metrics unreachable twice in a row, it is learned anew when it is back."""
    first = spec("gpu", 16, "vllm")
    async with Fleet([first]) as fleet:
        url = fleet["gpu"].url
        port = int(url.rsplit(":", 1)[1])
        balancer = build_balancer(
            "test-region", [BackendSpec("gpu", url, (MODEL,))], BalancerConfig(info_every_s=1.0)
        )  # idle: every 1 s
        async with balancer, client_of(balancer) as client:
            backend = balancer.pool["gpu"]
            tasks = await flood(client, 40)
            await eventually(lambda: backend.cap_now.slots == 16, timeout=LEARN_WITHIN_S)
            await fleet["gpu"].stop()  # down for a while, back with 32 slots, same address
            await cancel(tasks)
            await eventually(lambda: backend.cap_now.slots is None, timeout=LEARN_WITHIN_S)
            async with Fleet([spec("gpu", 32, "vllm", port)]):
                # the requests cut by the stop ejected it for a few seconds: wait that out
                await eventually(lambda: not balancer.pool.snapshot().backends[0].ejected,
                                 timeout=LEARN_WITHIN_S)
                tasks = await flood(client, 60)
                await eventually(lambda: backend.cap_now.slots == 32, timeout=LEARN_WITHIN_S)
                await cancel(tasks)


async def test_the_policys_max_seqs_pins_it_and_every_surface_shows_it() -> None:
    async with Fleet([spec("gpu", 64, "vllm")]) as fleet:
        policy = load_policy_text(f"""
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region r {{ location 1 1; jurisdiction X; endpoints 127.0.0.1; capacity 10rps
    gpu gpu {{ url {fleet["gpu"].url}; models {MODEL}; max-seqs 24 }}
}}
service chat.infer.example.com {{ all-down answer-nothing }}
""")
        balancer = build_balancer("r", policy.region("r").gpus)
        async with balancer, client_of(balancer) as client:
            backend = balancer.pool["gpu"]
            assert (backend.cap_now.slots, backend.cap_now.source) == (24, "pinned")
            tasks = await flood(client, 40)
            await eventually(lambda: balancer.dispatcher.queued == 16)
            await eventually(lambda: fleet["gpu"].engine.state().running == 24)
            await asyncio.sleep(0.2)
            assert fleet["gpu"].engine.state().running == 24  # the pin, not the server's 64
            async with admin_client(balancer) as adm, adm.get("/_admin/state") as resp:
                (state,) = (await resp.json())["backends"]
            assert state["capacity"] == {"slots": 24, "source": "pinned", "limit": 24,
                                         "provisional": False}
            async with admin_client(balancer) as adm, adm.get("/metrics") as resp:
                text = await resp.text()
            assert 'director_balancer_capacity{backend="gpu",source="pinned"} 24.0' in text
            async with admin_client(balancer) as adm, adm.post("/_admin/explain", json={
                    "path": "/v1/completions", "body": completion(10)}) as resp:
                explained = await resp.json()
            assert "capacity 24 (pinned)" in str(explained)
            await cancel(tasks)
