# SPDX-License-Identifier: Apache-2.0
"""What the live routing bench reads from the simulated GPU servers during a replay's counted
window (``sample_fleet``):

- **slot use**: sequences running on each server (``/_sim/state``), sampled every
  ``min(0.5 wall s, 1 model s)``;
- **collapse check**: each server's load, running + waiting, from the same samples, one per
  model second (the first of each). Per second, the ratio of the most loaded server's load
  to the fleet's mean; ``collapse`` reports the maximum over the seconds and the share of
  seconds above ``COLLAPSE_LIMIT`` (1.5x: no backend should go above it). Seconds when the
  whole fleet is idle have no ratio and are left out;
- **prefix-cache hit rate**: the fleet's ``vllm:prefix_cache_hits_total`` over its
  ``vllm:prefix_cache_queries_total`` (tokens), both summed over the servers' ``/metrics``
  deltas between the start and the end of the window; 0 when no server exports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp

PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
COLLAPSE_LIMIT = 1.5
SLOT_PERIOD_S = 0.5  # wall seconds between samples at most


class Server(Protocol):
    name: str
    url: str


Counters = dict[str, tuple[float, float]]  # server -> (queries, hits)


@dataclass(frozen=True)
class FleetSamples:
    running: dict[str, list[int]]  # per server, every sample
    loads: list[tuple[float, tuple[int, ...]]]  # (model seconds, running + waiting per server)
    hit_rate: float


async def sim_states(sims: Sequence[Server],
                     session: aiohttp.ClientSession | None = None) -> dict[str, dict]:
    """Every server's ``/_sim/state``."""
    async with contextlib.AsyncExitStack() as stack:
        if session is None:
            session = await stack.enter_async_context(aiohttp.ClientSession())

        async def one(p: Server) -> dict:
            async with session.get(p.url + "/_sim/state") as resp:
                return await resp.json()

        states = await asyncio.gather(*(one(p) for p in sims))
    return {p.name: s for p, s in zip(sims, states, strict=True)}


def prefix_counters(text: str) -> tuple[float, float]:
    """(queries, hits) in a Prometheus text page, summed over label sets; 0 when absent."""
    totals = {PREFIX_QUERIES: 0.0, PREFIX_HITS: 0.0}
    for line in text.splitlines():
        for name in totals:
            if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return totals[PREFIX_QUERIES], totals[PREFIX_HITS]


async def fleet_counters(sims: Sequence[Server], session: aiohttp.ClientSession) -> Counters:
    async def one(p: Server) -> tuple[float, float]:
        async with session.get(p.url + "/metrics") as resp:
            return prefix_counters(await resp.text())

    values = await asyncio.gather(*(one(p) for p in sims))
    return {p.name: v for p, v in zip(sims, values, strict=True)}


def hit_rate(before: Counters, after: Counters) -> float:
    """Fleet hits over fleet queries between two scrapes; 0 with no queries."""
    queries = sum(after[n][0] - before[n][0] for n in after)
    hits = sum(after[n][1] - before[n][1] for n in after)
    return hits / queries if queries > 0 else 0.0


def collapse(loads: Sequence[tuple[float, Sequence[int]]],
             limit: float = COLLAPSE_LIMIT) -> tuple[float, float]:
    """(max over seconds of max/mean load, share of seconds above ``limit``), over the first
    sample of each whole model second; (NaN, 0) when the fleet was idle throughout."""
    ratios = []
    seen: set[int] = set()
    for at, per_server in loads:
        second = int(at)
        if second in seen:
            continue
        seen.add(second)
        mean = statistics.fmean(per_server) if per_server else 0.0
        if mean > 0:
            ratios.append(max(per_server) / mean)
    if not ratios:
        return float("nan"), 0.0
    return max(ratios), sum(r > limit for r in ratios) / len(ratios)


async def sample_fleet(sims: Sequence[Server], scale: float, stop: asyncio.Event) -> FleetSamples:
    """Sample ``sims`` until ``stop`` (``scale``: model seconds per wall second), and their
    prefix-cache counters at the start and at the end."""
    period = min(SLOT_PERIOD_S, 1.0 / scale)
    running: dict[str, list[int]] = {p.name: [] for p in sims}
    loads: list[tuple[float, tuple[int, ...]]] = []
    async with aiohttp.ClientSession() as session:
        before = await fleet_counters(sims, session)
        start = time.monotonic()
        tick = 0
        while not stop.is_set():
            at = (time.monotonic() - start) * scale
            states = await sim_states(sims, session)
            for name, state in states.items():
                running[name].append(state["running"])
            loads.append((at, tuple(s["running"] + s["waiting"] for s in states.values())))
            tick += 1  # on a fixed grid, so that no model second goes without a sample
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(),
                                       max(0.0, start + tick * period - time.monotonic()))
        after = await fleet_counters(sims, session)
    return FleetSamples(running, loads, hit_rate(before, after))
