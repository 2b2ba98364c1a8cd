# SPDX-License-Identifier: Apache-2.0
"""Helpers for the balancer tests: snapshots and requests for plugin tables, and a real
balancer in front of a real simulated fleet, all on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from policies.model import Policy
from regions.balancer import (
    BackendSpec,
    Balancer,
    BalancerConfig,
    SharedStateConfig,
    build_balancer,
)
from regions.balancer.types import BackendSnapshot, Endpoint, RequestInfo
from regions.simulator import Fleet, ServerSpec, SimServer

MODEL = "sim-model"


def snap(name: str = "b0", index: int = 0, **overrides: Any) -> BackendSnapshot:
    fields: dict[str, Any] = {
        "index": index,
        "name": name,
        "models": frozenset({MODEL}),
        "healthy": True,
        "ejected": False,
        "draining": False,
        "in_flight": 0,
        "cap": 4,
        "work_tokens": 0.0,
        "tokens_per_s": 50.0,
        "rate_learned": True,
    }
    fields.update(overrides)
    return BackendSnapshot(**fields)


def req(**overrides: Any) -> RequestInfo:
    base = RequestInfo(
        endpoint=Endpoint.COMPLETIONS,
        model=MODEL,
        prompt_tokens=100,
        max_tokens=10,
        output_tokens=10.0,
        cost_tokens=11.0,
        stream=True,
    )
    return dataclasses.replace(base, **overrides)


def completion(output_tokens: int = 10, *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "prompt": "hello",
        "max_tokens": output_tokens,
        "x_prompt_tokens": 100,
        "stream": stream,
        **extra,
    }


class RunClock:
    """Seconds this process's event loop ran: ``time.monotonic()`` less the stretches in
    which the loop could not run at all (a host that deschedules the VM, other processes
    on every core, on CI: stretches of 60-450 ms, dozens in a few seconds;
    docs/research/test-machine.md).

    A task reads the clock every ``TICK_S`` (``async with RunClock() as clock``), and every
    caller reads it too; two reads more than ``GAP_S`` apart are a stretch the loop did
    not run, and all but ``TICK_S`` of it is not counted. What the simulator and the
    balancer time on this clock (a time to first token, a token rate, an ejection's
    length) is the servers' doing, not the machine's: the simulator, the balancer and the
    client run on this one loop, so while it stands still none of them does anything."""

    TICK_S = 0.005
    GAP_S = 0.012  # a tick late by 7 ms: the loop did not run (a busy one ticks on time)

    def __init__(self) -> None:
        self._last = time.monotonic()
        self.lost_s = 0.0  # time not counted so far
        self._ticker: asyncio.Task[None] | None = None

    def __call__(self) -> float:
        now = time.monotonic()
        gap = now - self._last
        if gap > self.GAP_S:
            self.lost_s += gap - self.TICK_S
        self._last = now
        return now - self.lost_s

    async def _tick(self) -> None:
        while True:
            self()
            await asyncio.sleep(self.TICK_S)

    async def __aenter__(self) -> RunClock:
        self()
        self._ticker = asyncio.create_task(self._tick(), name="run-clock")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)


class SimRunClock:
    """The simulator's ``Clock`` on a ``RunClock``: model time runs ``time_scale`` times
    faster than the process runs, and stands still while it is off the CPU."""

    def __init__(self, run: RunClock, time_scale: float) -> None:
        self.run = run
        self.time_scale = time_scale

    def now(self) -> float:
        return self.run() * self.time_scale

    async def sleep_until(self, deadline: float) -> None:
        # a sleep that ends late because the process was off the CPU ends early on this
        # clock: sleep the rest
        while (delay := (deadline - self.now()) / self.time_scale) > 0:
            await asyncio.sleep(delay)


@asynccontextmanager
async def stack(
    speeds: Sequence[float] = (1.0, 1.0),
    *,
    time_scale: float = 20.0,
    cap: int = 16,
    config: BalancerConfig | None = None,
    shared_state: SharedStateConfig | None = None,
    capacity_rps: float | None = None,
    policy: Policy | None = None,
    clock: RunClock | None = None,
) -> AsyncIterator[tuple[Fleet, Balancer, aiohttp.ClientSession]]:
    """A simulated fleet (``gpu0``, ``gpu1``, ...), a balancer in front, a client session.
    With ``clock`` (running), the engines and the balancer (its pool and proxy: TTFTs,
    token rates, ejections) keep time on it instead of the wall clock."""
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,), speed=s) for i, s in enumerate(speeds)]
    fleet = Fleet(specs, time_scale=time_scale)
    if clock is not None:
        fleet.servers = {s.name: SimServer(s, seed=i, clock=SimRunClock(clock, time_scale))
                         for i, s in enumerate(specs)}
    async with fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), cap) for s in fleet]
        config = dataclasses.replace(config or BalancerConfig(), shared_state=shared_state,
                                     capacity_rps=capacity_rps, policy=policy)
        balancer = (build_balancer("test-region", backends, config) if clock is None
                    else Balancer("test-region", backends, config, clock=clock))
        async with balancer, aiohttp.ClientSession(base_url=balancer.url) as client:
            yield fleet, balancer, client


def admin_client(balancer: Balancer, token: str | None = None) -> aiohttp.ClientSession:
    """A client of ``balancer``'s admin listener (``/metrics``, ``/_admin/*``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return aiohttp.ClientSession(base_url=balancer.admin_url, headers=headers)


async def stream_completion(
    client: aiohttp.ClientSession, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """POST and read the whole response: (status, backend header, body)."""
    async with client.post("/v1/completions", json=body, headers=headers) as resp:
        data = await resp.read()
        return resp.status, resp.headers.get("x-director-backend", ""), data


async def eventually(check: Callable[[], Any], *, timeout: float = 5.0) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.01)
