# SPDX-License-Identifier: Apache-2.0
"""Helpers for the balancer tests: snapshots and requests for plugin tables, and a real
balancer in front of a real simulated fleet, all on 127.0.0.1 port 0."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
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
from tests.run_clock import RunClock, SimRunClock

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
