# SPDX-License-Identifier: Apache-2.0
"""Warm standby over real HTTP: a region whose only server is asleep (vLLM's sleep mode in
the simulator) wakes it for the first request and holds the requests meanwhile; a wake
longer than a request's deadline sheds it for a sibling instead; an idle standby server
goes back to sleep; a wake that fails sheds what waited for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.scheduling.admission import AdmissionConfig
from regions.balancer.scheduling.demand import DemandSettings
from regions.balancer.signals.standby import StandbySettings
from regions.simulator import Fleet, ServerSpec
from regions.simulator.faults import Fault, FaultMode

from .helpers import MODEL, admin_client

SCALE = 20.0  # model seconds per wall second


@asynccontextmanager
async def standby_region(wake_s: float, *, declared_wake_s: float | None = None,
                         config: BalancerConfig | None = None,
                         ) -> AsyncIterator[tuple[Fleet, object, aiohttp.ClientSession]]:
    """One standby server, asleep, waking in ``wake_s`` model seconds."""
    async with Fleet([ServerSpec("gpu0", asleep=True, wake_s=wake_s)],
                     time_scale=SCALE) as fleet:
        backend = BackendSpec("gpu0", fleet["gpu0"].url, (MODEL,), 8, standby=True,
                              wake_s=declared_wake_s)
        async with build_balancer("use1", [backend], config or BalancerConfig()) as balancer, \
                aiohttp.ClientSession(base_url=balancer.url) as client:
            yield fleet, balancer, client


async def stream_ttft(client: aiohttp.ClientSession) -> tuple[int, float]:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 16, "x_output_tokens": 16,
            "stream": True}
    start = time.monotonic()
    async with client.post("/v1/completions", json=body) as resp:
        first = None
        async for _ in resp.content.iter_any():
            first = first or time.monotonic() - start
        return resp.status, first if first is not None else float("inf")


async def test_the_first_requests_wait_for_a_standby_server_to_wake() -> None:
    wake = 30.0  # model seconds: 1.5 s wall
    async with standby_region(wake) as (fleet, balancer, client):
        assert fleet["gpu0"].context.sleep.asleep
        results = await asyncio.gather(*(stream_ttft(client) for _ in range(6)))
        assert [status for status, _ in results] == [200] * 6
        # held while it woke: the first token within the wake and a second
        assert max(ttft for _, ttft in results) <= wake / SCALE + 1.0
        assert fleet["gpu0"].context.sleep.wakes == 1
        async with admin_client(balancer) as admin, admin.get("/metrics") as resp:
            text = await resp.text()
        assert 'director_balancer_standby_wakes_total{backend="gpu0",outcome="ok"} 1.0' in text


async def test_a_wake_longer_than_the_deadline_sheds_for_a_sibling_at_once() -> None:
    config = BalancerConfig(admission=AdmissionConfig(queue_timeout_s=1.0))
    async with standby_region(600.0, declared_wake_s=30.0, config=config) as (
            _fleet, balancer, client):
        start = time.monotonic()
        async with client.post("/v1/completions", json={"model": MODEL, "prompt": "hi",
                                                         "max_tokens": 4}) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "30"
        assert time.monotonic() - start < 0.5  # not held for a wake it cannot wait for
        async with admin_client(balancer) as admin, admin.get("/metrics") as resp:
            assert 'director_balancer_shed_total{reason="waking"} 1.0' in await resp.text()


async def test_an_idle_standby_server_goes_back_to_sleep() -> None:
    config = BalancerConfig(standby=StandbySettings(idle_s=0.3, tick_s=0.1),
                            demand=DemandSettings(window_s=0.5, settle_s=0.5))
    async with standby_region(2.0, config=config) as (fleet, balancer, client):
        status, _ = await stream_ttft(client)
        assert status == 200 and not fleet["gpu0"].context.sleep.asleep
        for _ in range(100):
            await asyncio.sleep(0.05)
            if fleet["gpu0"].context.sleep.asleep:
                break
        assert fleet["gpu0"].context.sleep.asleep
        assert "standby" in balancer.pool["gpu0"].drains
        status, _ = await stream_ttft(client)  # and wakes again for the next one
        assert status == 200 and fleet["gpu0"].context.sleep.wakes == 2


async def test_a_failed_wake_sheds_what_waited_and_leaves_it_asleep() -> None:
    async with standby_region(2.0) as (fleet, balancer, client):
        fleet["gpu0"].set_fault(Fault(FaultMode.FAIL))  # every answer 503: /wake_up too
        status, _ = await stream_ttft(client)
        assert status == 429
        assert "standby" in balancer.pool["gpu0"].drains and not balancer.pool["gpu0"].waking
