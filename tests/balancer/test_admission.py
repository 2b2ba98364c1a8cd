# SPDX-License-Identifier: Apache-2.0
"""Admission: late binding through the priority queue, deadlines, shedding, Retry-After."""

from __future__ import annotations

import asyncio
import random

import pytest

from regions.balancer.errors import NoBackendError, ShedError
from regions.balancer.scheduling.admission import AdmissionConfig, Dispatcher
from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from tests.balancer.helpers import MODEL, req


def dispatcher(n: int = 2, cap: int = 1, **admission) -> Dispatcher:
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", (MODEL,), cap) for i in range(n)]
    profile = build_profile(register_builtin_plugins(Registry()), rng=random.Random(0))
    return Dispatcher(BackendPool(specs), profile, AdmissionConfig(**admission))


async def test_binds_at_once_while_slots_are_free() -> None:
    d = dispatcher()
    a = await d.acquire(req())
    b = await d.acquire(req())
    assert {a.backend.name, b.backend.name} == {"b0", "b1"}
    assert d.queued == 0


async def test_waits_for_a_slot_then_binds_highest_priority_first() -> None:
    d = dispatcher(n=1)
    held = await d.acquire(req())
    low = asyncio.create_task(d.acquire(req(priority=0)))
    high = asyncio.create_task(d.acquire(req(priority=5)))
    await asyncio.sleep(0.01)
    assert d.queued == 2 and not low.done()
    held.release()
    await asyncio.sleep(0.01)
    assert high.done() and not low.done()
    high.result().release()
    lease = await asyncio.wait_for(low, 1)
    lease.release()
    assert d.pool.in_flight() == 0


async def test_deadline_sheds_with_retry_after() -> None:
    d = dispatcher(n=1)
    held = await d.acquire(req())
    with pytest.raises(ShedError) as info:
        await d.acquire(req(), timeout_s=0.05)
    assert info.value.reason == "deadline" and info.value.retry_after >= 1
    assert d.queued == 0
    held.release()


async def test_full_queue_sheds_or_evicts_lower_priority() -> None:
    d = dispatcher(n=1, max_queue=1)
    held = await d.acquire(req())
    waiting = asyncio.create_task(d.acquire(req(priority=0)))
    await asyncio.sleep(0.01)
    with pytest.raises(ShedError, match="queue-full"):
        await d.acquire(req(priority=0))
    urgent = asyncio.create_task(d.acquire(req(priority=9)))
    await asyncio.sleep(0.01)
    with pytest.raises(ShedError, match="evicted"):
        await waiting
    held.release()
    (await urgent).release()
    assert d.pool.in_flight() == 0 and d.queued == 0


async def test_cancelled_waiter_leaves_the_queue_and_leaks_nothing() -> None:
    d = dispatcher(n=1)
    held = await d.acquire(req())
    waiter = asyncio.create_task(d.acquire(req()))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert d.queued == 0
    held.release()
    assert d.pool.in_flight() == 0


async def test_waiter_cancelled_after_being_bound_releases_its_lease() -> None:
    d = dispatcher(n=1)
    held = await d.acquire(req())
    waiter = asyncio.create_task(d.acquire(req()))
    await asyncio.sleep(0.01)
    held.release()  # binds the waiter synchronously...
    assert d.pool.in_flight() == 1
    waiter.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert d.pool.in_flight() == 0


async def test_no_backend_errors_name_the_stage() -> None:
    d = dispatcher()
    with pytest.raises(NoBackendError) as info:
        await d.acquire(req(model="unknown"))
    assert info.value.stage == "model"
    d.pool.set_draining("b0", True)
    d.pool.set_draining("b1", True)
    with pytest.raises(NoBackendError) as info:
        await d.acquire(req())
    assert info.value.stage == "health"


async def test_retry_after_is_backlog_over_fleet_throughput() -> None:
    d = dispatcher(n=2, cap=2)
    for b in d.pool:
        d.pool.record_rate(b, 100.0)  # fleet throughput: 2 backends x 100 tok/s x cap 2
    leases = [await d.acquire(req(cost_tokens=500.0)) for _ in range(4)]
    assert d.retry_after() == 5  # ceil(2000 / 400)
    queued = asyncio.create_task(d.acquire(req(cost_tokens=400.0)))
    await asyncio.sleep(0.01)
    assert d.retry_after() == 6  # ceil(2400 / 400)
    queued.cancel()
    for lease in leases:
        lease.release()
    assert d.retry_after() == 1
