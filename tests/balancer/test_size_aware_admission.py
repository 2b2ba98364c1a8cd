# SPDX-License-Identifier: Apache-2.0
"""Size-aware late binding in the dispatcher (the opt-in size-aware profile, real pool): a
long request waits for the fast backend rather than start on the slow one, a short one never
waits, the wait is bounded, one cap for all means no waiting, and long requests go first in
a backlog."""

from __future__ import annotations

import asyncio
import random

import pytest

from regions.balancer.scheduling.admission import HOLD, Dispatcher
from regions.balancer.scheduling.backend import BackendSpec, Lease
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.scheduling.scorers.size_aware import SizeAwareScorer
from tests.balancer.helpers import MODEL, req

# size-aware as a hard preference, others choosing among what it accepts (opt-in)
SIZE_AWARE = (("size-aware", 8.0), ("outstanding-work", 2.0), ("queue-depth", 1.0))
DECLARED = [50, 80, 100, 120] * 2 + [400, 420] * 2 + [600, 650] * 2  # output lengths


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sized(output: int, cap: int | None = None):
    cap = output if cap is None else cap
    return req(max_tokens=cap, output_tokens=float(output), cost_tokens=10.0 + output)


def region(
    caps: list[int] = DECLARED * 2, **params: float
) -> tuple[Dispatcher, FakeClock, SizeAwareScorer]:
    """``fast`` (100 tok/s) and ``slow`` (40 tok/s), 4 slots each, no prefetch; the
    dispatcher has seen ``caps`` declared (budget 1.5 * 660 / 100 = 9.9 s); ``params``
    are the ``size-aware`` scorer's (``hold`` 1 unless given: the hold is opt-in)."""
    params = {"hold": 1.0, **params}
    clock = FakeClock()
    specs = [
        BackendSpec(n, f"http://127.0.0.1:{9000 + i}", (MODEL,), 4)
        for i, n in enumerate(("fast", "slow"))
    ]
    pool = BackendPool(specs, clock=clock)
    pool.record_rate(pool["fast"], 100.0)
    pool.record_rate(pool["slow"], 40.0)
    profile = build_profile(
        register_builtin_plugins(Registry()),
        rng=random.Random(0),
        scorers=SIZE_AWARE,
        scorer_params={"size-aware": params},
    )
    dispatcher = Dispatcher(pool, profile)
    scorer = next(ws.scorer for ws in profile.scorers if isinstance(ws.scorer, SizeAwareScorer))
    dispatcher.on_bind.append(scorer.on_bind)
    for b in pool.snapshot().backends:
        scorer.on_bind(req(), b)
    for cap in caps:
        dispatcher.refine(sized(cap))
    return dispatcher, clock, scorer


def occupy(d: Dispatcher, name: str, n: int) -> list[Lease]:
    return [d.pool.lease(d.pool[name].index, 400.0) for _ in range(n)]


async def test_long_request_waits_for_the_fast_backend() -> None:
    d, _, scorer = region()
    assert scorer.budget_s() is not None
    fast = occupy(d, "fast", 4)
    slow = occupy(d, "slow", 3)  # 7 of 8 slots busy, one free on the slow backend
    lease, decision = d.try_bind(d.refine(sized(600), learn=False))
    assert lease is None and decision.stopped_at == HOLD
    waiter = asyncio.create_task(d.acquire(sized(600)))
    await asyncio.sleep(0.01)
    assert not waiter.done() and d.queued == 1 and d.holds == 1
    fast[0].release()  # a fast slot frees: the held request takes it
    lease = await asyncio.wait_for(waiter, 1)
    assert lease.backend.name == "fast" and d.queued == 0
    for held in [*fast[1:], *slow, lease]:
        held.release()
    assert d.pool.in_flight() == 0


async def test_short_request_takes_the_slow_slot_at_once() -> None:
    d, _, _ = region()
    occupy(d, "fast", 4)
    occupy(d, "slow", 3)
    lease = await asyncio.wait_for(d.acquire(sized(80)), 1)
    assert lease.backend.name == "slow" and d.holds == 0


async def test_hold_runs_out_then_the_free_backend_is_taken() -> None:
    d, clock, _ = region()
    occupy(d, "fast", 4)
    occupy(d, "slow", 3)
    waiter = asyncio.create_task(d.acquire(sized(600)))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    clock.now += 5.0  # less than the hold (its finish on the fast backend: 1 + 6.1 s)
    d.pump()
    await asyncio.sleep(0.01)
    assert not waiter.done()
    clock.now += 5.0
    d.pump()
    lease = await asyncio.wait_for(waiter, 1)
    assert lease.backend.name == "slow"


async def test_a_quiet_region_holds_nothing() -> None:
    d, _, _ = region()
    occupy(d, "fast", 4)  # 4 of 8 slots busy: below the busy gate
    lease = await asyncio.wait_for(d.acquire(sized(600)), 1)
    assert lease.backend.name == "slow" and d.holds == 0


async def test_one_cap_for_all_holds_nothing() -> None:
    d, _, scorer = region(caps=[1000] * 64)
    assert scorer.budget_s() is None
    occupy(d, "fast", 4)
    occupy(d, "slow", 3)
    lease = await asyncio.wait_for(d.acquire(sized(211, cap=1000)), 1)
    assert lease.backend.name == "slow" and d.holds == 0


@pytest.mark.parametrize(
    ("params", "first"),
    # with lead 0.3 the long one, a second later, counts 0.3 * 610 / 100 = 1.83 s earlier
    [({}, "short"), ({"lead": 0.3}, "long")],
    ids=["arrival-order-by-default", "long-first-with-lead"],
)
async def test_who_goes_first_in_a_backlog(params: dict[str, float], first: str) -> None:
    d, clock, _ = region(**params)
    fast = occupy(d, "fast", 4)
    occupy(d, "slow", 4)  # everything full: both wait
    waiters = {"short": asyncio.create_task(d.acquire(sized(80)))}
    await asyncio.sleep(0.01)
    clock.now += 1.0
    waiters["long"] = asyncio.create_task(d.acquire(sized(600)))
    await asyncio.sleep(0.01)
    assert d.queued == 2
    fast[0].release()
    lease = await asyncio.wait_for(waiters.pop(first), 1)
    (other,) = waiters.values()
    assert lease.backend.name == "fast" and not other.done()
    other.cancel()


@pytest.mark.parametrize(
    ("first_hold", "backend"),
    [(1.0, "fast"), (0.0, "slow")],
    ids=["waits-for-the-fast-prefill", "off-by-default-takes-the-slow-slot"],
)
async def test_a_long_prompt_waits_for_a_fast_prefill(first_hold: float, backend: str) -> None:
    """A long prompt with a short answer (within the budget anywhere) prefills in 5 s on
    the free slow backend, against a 1 s wait for a fast slot and 2 s of prefill there:
    with ``first_hold`` it waits for the fast one and takes it when a slot frees."""
    d, _, _ = region(first_hold=first_hold)
    fast = occupy(d, "fast", 4)
    occupy(d, "slow", 3)
    long_prompt = req(max_tokens=80, output_tokens=80.0, cost_tokens=200.0 + 80.0)
    waiter = asyncio.create_task(d.acquire(long_prompt))
    await asyncio.sleep(0.01)
    assert waiter.done() == (backend == "slow")
    fast[0].release()
    lease = await asyncio.wait_for(waiter, 1)
    assert lease.backend.name == backend
