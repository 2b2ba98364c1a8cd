# SPDX-License-Identifier: Apache-2.0
"""The region queue's fair share across tenants (``fair_share``): table tests of the order
(tiers, aging, reserves, the virtual token counters and their lift) and the dispatcher
serving two backlogged tenants of weights 1 and 2 within VTC's bound of 1:2 at every
point, with variable request sizes."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from regions.balancer.errors import ShedError
from regions.balancer.scheduling.admission import AdmissionConfig, Dispatcher
from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.fair_share import FairShare, FairShareConfig
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.types import RequestInfo
from tests.balancer.helpers import MODEL, req


@dataclass
class Entry:
    request: RequestInfo
    since: float = 0.0


def ask(tenant: str | None, priority: int = 0, prompt: int = 100, output: float = 10.0,
        since: float = 0.0) -> Entry:
    return Entry(req(tenant=tenant, priority=priority, prompt_tokens=prompt,
                     output_tokens=output), since)


@pytest.mark.parametrize(("counters", "queue", "chosen"), [
    ({"a": 5.0, "b": 1.0}, [("a", 0), ("b", 0)], 1),  # smallest counter first
    ({"a": 1.0, "b": 5.0}, [("a", 0), ("b", 0)], 0),
    ({"a": 5.0, "b": 1.0}, [("a", 1), ("b", 0)], 0),  # a higher tier beats any counter
    ({"a": 1.0, "b": 1.0}, [("b", 0), ("a", 0)], 0),  # a tie: queue order
    ({"a": 0.0, "b": 9.0}, [("b", 0), ("b", 0), ("a", 0)], 2),  # a tenant's oldest entry
])
def test_the_next_request_by_tier_then_counter(counters, queue, chosen) -> None:
    fair = FairShare()
    fair.counters = dict(counters)
    entries = [ask(tenant, priority) for tenant, priority in queue]
    assert fair.next(entries, now=0.0, slots=4) == chosen


def test_a_waiting_low_tier_rises_one_tier_per_aging_period() -> None:
    fair = FairShare(FairShareConfig(aging_s=10.0))
    old_low = ask("a", priority=0, since=0.0)
    assert fair.next([old_low, ask("b", priority=2, since=19.0)], now=19.0, slots=4) == 1
    # the low tier's oldest has waited 31 s (0 + 3), the high tier's 6 s (2 + 0)
    assert fair.next([old_low, ask("b", priority=2, since=25.0)], now=31.0, slots=4) == 0


def test_aging_never_reorders_tenants_within_a_tier() -> None:
    """A tenant's long backlog does not overtake a newly arrived tenant of the same tier
    with a smaller counter (aging ranks tiers, not requests)."""
    fair = FairShare(FairShareConfig(aging_s=10.0))
    fair.counters = {"a": 900.0, "b": 100.0}
    backlog = [ask("a", since=0.0) for _ in range(3)]
    fresh = ask("b", since=59.0)
    assert fair.next([*backlog, fresh], now=60.0, slots=4) == 3


def test_a_tenant_below_its_reserve_goes_first_whatever_its_counter() -> None:
    fair = FairShare()
    fair.set_tenants({"a": 1.0, "b": 1.0}, {"b": 0.25})
    fair.counters = {"a": 0.0, "b": 100.0}
    fair.in_flight = {"b": 1}
    entries = [ask("a"), ask("b")]
    assert fair.next(entries, now=0.0, slots=8) == 1  # holds 1 of its 2 reserved slots
    fair.in_flight = {"b": 2}
    assert fair.next(entries, now=0.0, slots=8) == 0  # at its reserve: counters decide


@pytest.mark.parametrize(("tenant", "in_flight", "kept"), [
    ("a", {"b": 1}, 1.0),  # b holds 1 of its 2 (a quarter of 8)
    ("a", {"b": 2}, 0.0),  # b holds its reserve
    ("a", {"b": 5}, 0.0),  # or more: nothing kept, never negative
    ("a", {}, 0.0),  # b has nothing in flight: no demand, nothing kept
    ("b", {"b": 1}, 0.0),  # a tenant's own reserve is never kept from it
    (None, {"b": 1, "c": 1}, 4.0),  # a request of no tenant: every reserve (1 + 3)
    ("c", {"b": 1, "c": 1}, 0.0),  # below its own reserve: any free slot is its own
    ("c", {"b": 1, "c": 4}, 1.0),  # at its reserve: b's unheld one is kept
])
def test_kept_free_is_the_unheld_reserves_of_the_others_with_demand(
        tenant: str | None, in_flight: dict[str, int], kept: float) -> None:
    fair = FairShare()
    fair.set_tenants({"a": 1.0, "b": 1.0, "c": 1.0}, {"b": 0.25, "c": 0.5})
    fair.in_flight = dict(in_flight)
    assert fair.kept_free(tenant, slots=8) == pytest.approx(kept)


async def test_a_reserve_with_demand_keeps_its_slots_free_of_a_flood() -> None:
    """b reserves half of 8 slots and has one request in flight: a's flood takes 4 slots
    (8 less b's 3 unheld), not 7, and b's next three requests bind at once, without
    waiting for one of a's to end."""
    d = dispatcher(slots=8)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {"b": 0.5})
    b_first = await d.acquire(req(tenant="b"))
    flood = [asyncio.create_task(d.acquire(req(tenant="a"))) for _ in range(10)]
    await asyncio.sleep(0.01)
    assert sum(t.done() for t in flood) == 4 and d.queued == 6
    b_more = [await asyncio.wait_for(d.acquire(req(tenant="b")), 0.5) for _ in range(3)]
    a_bound = [t.result() for t in flood if t.done()]
    for lease in a_bound:  # a's requests end: a takes their slots back, no more
        d.finished(req(tenant="a"), 10.0)
        lease.release()
    await asyncio.sleep(0.01)
    assert sum(t.done() for t in flood) == 8 and d.queued == 2
    for lease in [b_first, *b_more]:  # b goes idle: its reserve is no longer kept
        d.finished(req(tenant="b"), 10.0)
        lease.release()
    await asyncio.sleep(0.01)
    assert all(t.done() for t in flood) and d.queued == 0
    for task in flood:
        task.result().release()


async def test_a_tenant_below_its_reserve_takes_a_free_slot_others_reserves_aside() -> None:
    """8 slots; a holds 6 (over its quarter, taken before c had demand), b and c one each.
    Two of a's end: b, below its own quarter, takes a free slot at once although c's half
    is not free (a's is kept from a, not from b)."""
    d = dispatcher(slots=8)
    d.fair.set_tenants({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 0.25, "b": 0.25, "c": 0.5})
    a_held = [await d.acquire(req(tenant="a")) for _ in range(6)]
    b_held = await d.acquire(req(tenant="b"))
    c_held = await d.acquire(req(tenant="c"))
    for lease in a_held[:2]:
        d.finished(req(tenant="a"), 10.0)
        lease.release()
    b_next = await asyncio.wait_for(d.acquire(req(tenant="b")), 0.5)
    a_next = asyncio.create_task(d.acquire(req(tenant="a")))  # at its quarter: c's kept
    await asyncio.sleep(0.01)
    assert not a_next.done()
    a_next.cancel()
    await asyncio.gather(a_next, return_exceptions=True)
    for lease in [*a_held[2:], b_held, c_held, b_next]:
        lease.release()


async def test_a_request_bound_as_its_client_leaves_frees_its_tenants_slot() -> None:
    d = dispatcher(slots=1)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {})
    held = await d.acquire(req(tenant="a"))
    waiting = asyncio.create_task(d.acquire(req(tenant="b")))
    await asyncio.sleep(0.01)
    d.finished(req(tenant="a"), 10.0)
    held.release()  # binds b's queued request ...
    waiting.cancel()  # ... as its client goes, before it resumes
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled()
    assert d.fair.in_flight == {} and d.pool.snapshot().free_slots == 1


async def test_without_reserves_a_flood_takes_every_free_slot() -> None:
    d = dispatcher(slots=8)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {})
    b_first = await d.acquire(req(tenant="b"))
    flood = [asyncio.create_task(d.acquire(req(tenant="a"))) for _ in range(10)]
    await asyncio.sleep(0.01)
    assert sum(t.done() for t in flood) == 7
    b_next = asyncio.create_task(d.acquire(req(tenant="b")))
    await asyncio.sleep(0.01)
    assert not b_next.done()  # waits for a slot to turn over
    for task in [*flood, b_next]:
        task.cancel()
    await asyncio.gather(*flood, b_next, return_exceptions=True)
    for task in flood:
        if task.done() and not task.cancelled() and task.exception() is None:
            task.result().release()
    b_first.release()


def test_counters_charge_weighted_tokens_and_settle_the_real_output() -> None:
    fair = FairShare()
    fair.set_tenants({"a": 1.0, "b": 2.0}, {})
    request = req(tenant="b", prompt_tokens=100, output_tokens=50.0)
    fair.bound(request)
    assert fair.counter("b") == pytest.approx((100 + 2 * 50) / 2)
    assert fair.in_flight == {"b": 1}
    fair.finished(request, 80)  # 30 more than predicted, output weighs 2, weight 2
    assert fair.counter("b") == pytest.approx((100 + 2 * 80) / 2)
    assert fair.in_flight == {}


def test_a_newly_backlogged_tenant_is_lifted_and_banks_no_credit() -> None:
    fair = FairShare()
    fair.counters = {"a": 500.0, "b": 0.0}
    queued = [ask("a")]
    fair.arrived("b", queued)
    assert fair.counter("b") == 500.0  # lifted to the smallest queued counter
    fair.arrived("a", queued)
    assert fair.counter("a") == 500.0  # already backlogged: unchanged
    fair.counters["c"] = 900.0
    fair.arrived("c", queued)
    assert fair.counter("c") == 900.0  # never lowered


def dispatcher(slots: int = 1, max_queue: int = 4096) -> Dispatcher:
    specs = [BackendSpec("b0", "http://127.0.0.1:9000", (MODEL,), slots)]
    profile = build_profile(register_builtin_plugins(Registry()), rng=random.Random(0))
    return Dispatcher(BackendPool(specs), profile, AdmissionConfig(max_queue=max_queue))


async def test_two_backlogged_tenants_weighted_one_to_two_stay_within_the_vtc_bound() -> None:
    d = dispatcher()
    d.fair.set_tenants({"a": 1.0, "b": 2.0}, {})
    rng = random.Random(7)
    held = await d.acquire(req())  # the only slot: everything else queues
    sizes = {}
    tasks = []
    for _ in range(300):
        for tenant in ("a", "b"):
            prompt, output = rng.randint(50, 400), float(rng.randint(5, 100))
            request = req(tenant=tenant, prompt_tokens=prompt, output_tokens=output)
            task = asyncio.create_task(d.acquire(request))
            sizes[task] = request
            tasks.append(task)
    await asyncio.sleep(0.01)
    assert d.queued == 600
    served = {"a": 0.0, "b": 0.0}
    biggest = max(r.prompt_tokens + 2 * r.output_tokens for r in sizes.values())
    worst = 0.0
    held.release()
    for _ in range(400):  # both stay backlogged throughout
        while not any(t.done() for t in tasks):
            await asyncio.sleep(0)
        done = next(t for t in tasks if t.done())
        tasks.remove(done)
        request, lease = sizes[done], done.result()
        served[request.tenant] += request.prompt_tokens + 2 * request.output_tokens
        worst = max(worst, abs(served["a"] / 1.0 - served["b"] / 2.0))
        d.finished(request, request.output_tokens)
        lease.release()
        await asyncio.sleep(0)
    # Sheng et al., Theorem 4.4: two backlogged clients' weighted service differs by at
    # most 2U, U the largest weighted cost of one request
    assert worst <= 2 * biggest, (worst, biggest)
    assert served["b"] / served["a"] == pytest.approx(2.0, rel=0.1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_without_tenants_the_queue_keeps_priority_then_arrival() -> None:
    d = dispatcher()
    held = await d.acquire(req())
    order = []

    async def take(name: str, priority: int) -> None:
        lease = await d.acquire(req(priority=priority))
        order.append(name)
        lease.release()

    tasks = [asyncio.create_task(take(n, p)) for n, p in (("x", 0), ("y", 1), ("z", 0))]
    await asyncio.sleep(0.01)
    held.release()
    await asyncio.gather(*tasks)
    assert order == ["y", "x", "z"]
    assert req().tenant is None  # requests of a policy without identity


def charge(fair: FairShare, tenant: str, prompt: int, output: float = 0.0) -> RequestInfo:
    """``tenant`` is bound a request of this size (which raises the largest cost, U)."""
    request = req(tenant=tenant, prompt_tokens=prompt, output_tokens=output)
    fair.bound(request)
    return request


def test_a_rejoining_tenant_keeps_a_few_requests_of_credit_and_no_more() -> None:
    fair = FairShare(FairShareConfig(credit_requests=2.0))
    charge(fair, "a", prompt=100)  # U = 100
    fair.counters = {"a": 1000.0, "b": 0.0, "c": 950.0}
    queued = [ask("a")]
    fair.arrived("b", queued)
    assert fair.counter("b") == 800.0  # two requests of credit below the smallest queued
    fair.arrived("c", queued)
    assert fair.counter("c") == 950.0  # within its credit already: unchanged


def test_a_tenant_below_its_share_of_slots_goes_before_a_smaller_counter() -> None:
    fair = FairShare()
    charge(fair, "a", prompt=100)  # U = 100; a holds 1 slot
    charge(fair, "a", prompt=100)
    charge(fair, "a", prompt=100)  # a holds 3 of 4 slots, over its share of 2
    fair.counters = {"a": 100.0, "b": 180.0}
    entries = [ask("a"), ask("b")]
    assert fair.next(entries, now=0.0, slots=4) == 1  # b holds 0 of its 2, within U of a
    fair.counters["b"] = 250.0
    assert fair.next(entries, now=0.0, slots=4) == 0  # more than U ahead: counters decide


async def test_a_tenant_that_sends_now_and_then_is_served_at_the_next_free_slot() -> None:
    """a floods the queue; b's one request takes the next slot that frees, not a turn
    after a's oldest (which the paper's lift, level with a, would give it)."""
    d = dispatcher(slots=4)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {})
    running = [await d.acquire(req(tenant="a")) for _ in range(4)]
    flood = [asyncio.create_task(d.acquire(req(tenant="a"))) for _ in range(10)]
    await asyncio.sleep(0.01)
    b = asyncio.create_task(d.acquire(req(tenant="b")))
    await asyncio.sleep(0.01)
    assert d.queued == 11
    d.finished(req(tenant="a"), 10.0)
    running.pop().release()
    await asyncio.sleep(0.01)
    assert b.done() and not any(t.done() for t in flood)
    b.result().release()
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_a_full_queue_sheds_the_flooding_tenants_newest_not_another_tenant() -> None:
    d = dispatcher(max_queue=4)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {})
    held = await d.acquire(req(tenant="a"))
    flood = [asyncio.create_task(d.acquire(req(tenant="a"))) for _ in range(4)]
    await asyncio.sleep(0.01)
    assert d.queued == 4
    b = asyncio.create_task(d.acquire(req(tenant="b")))  # evicts a's newest
    await asyncio.sleep(0.01)
    assert d.queued == 4 and not b.done()
    assert isinstance(flood[-1].exception(), ShedError)
    assert not any(t.done() for t in flood[:-1])
    more_a = asyncio.create_task(d.acquire(req(tenant="a")))  # a's own: shed as before
    await asyncio.sleep(0.01)
    assert isinstance(more_a.exception(), ShedError)
    untenanted = asyncio.create_task(d.acquire(req()))  # without tenants nothing changes
    await asyncio.sleep(0.01)
    assert isinstance(untenanted.exception(), ShedError)
    no_room = dispatcher(max_queue=0)
    busy = await no_room.acquire(req(tenant="a"))
    with pytest.raises(ShedError):  # nothing to evict: shed, not an error
        await no_room.acquire(req(tenant="b"))
    busy.release()
    held.release()
    for task in [*flood[:-1], b]:
        task.cancel()
    await asyncio.gather(*flood, b, return_exceptions=True)


def flooding_share(turnovers: float = 2.0) -> FairShare:
    """A fair share over a region of 4 slots whose flooding span is ``turnovers`` x 4 binds."""
    fair = FairShare(FairShareConfig(flood_turnovers=turnovers))
    fair.next([ask("x")], now=0.0, slots=4)  # tells it the region's slots
    return fair


def test_a_tenant_queued_through_its_span_and_served_its_share_goes_after_a_newcomer() -> None:
    fair = flooding_share()
    fair.arrived("a", [])
    backlog = [ask("a") for _ in range(3)]
    for _ in range(7):
        charge(fair, "a", prompt=100)
    fair.arrived("b", backlog)
    fair.counters = {"a": 100.0, "b": 500.0}  # on counters alone a goes first
    entries = [*backlog, ask("b")]
    assert fair.next(entries, now=0.0, slots=4) == 0  # 7 binds: short of 2 x 4
    charge(fair, "a", prompt=100)
    fair.counters = {"a": 100.0, "b": 500.0}
    assert fair.next(entries, now=0.0, slots=4) == 3  # 8: a has been flooding


def test_a_backlogged_tenant_served_below_its_share_competes_by_counter() -> None:
    fair = flooding_share()
    fair.arrived("a", [])
    backlog = [ask("a") for _ in range(3)]
    for _ in range(8):  # a is served one in four lately: under 0.8 of its half
        charge(fair, "a", prompt=100)
        for _ in range(3):
            charge(fair, "b", prompt=100)
    fair.arrived("b", backlog)
    fair.counters = {"a": 100.0, "b": 500.0}
    assert fair.next([*backlog, ask("b")], now=0.0, slots=4) == 0


def test_when_every_queued_tenant_is_backlogged_the_counters_alone_decide() -> None:
    fair = flooding_share()
    fair.arrived("a", [])
    fair.arrived("b", [ask("a")])
    for _ in range(8):
        charge(fair, "a", prompt=100)
        charge(fair, "b", prompt=100)
    fair.counters = {"a": 100.0, "b": 500.0}
    assert fair.next([ask("b"), ask("a")], now=0.0, slots=4) == 1


def test_a_reserve_still_goes_first_when_its_tenant_is_flooding() -> None:
    fair = flooding_share()
    fair.set_tenants({"a": 1.0, "b": 1.0}, {"a": 0.5})
    fair.arrived("a", [])
    backlog = [ask("a")]
    for _ in range(8):
        request = charge(fair, "a", prompt=100)
        fair.finished(request, request.output_tokens)  # a holds nothing: under its 2 slots
    fair.arrived("b", backlog)
    assert fair.next([*backlog, ask("b")], now=0.0, slots=4) == 0


async def test_a_burst_past_its_credit_is_served_before_a_flooding_tenant() -> None:
    """a floods a region of 4 slots for longer than its span (6 turnovers); b then sends a
    burst of 12 requests, more than its credit (8 requests) and its share of slots: every
    one of them is bound before another of a's."""
    d = dispatcher(slots=4)
    d.fair.set_tenants({"a": 1.0, "b": 1.0}, {})
    running = [await d.acquire(req(tenant="a")) for _ in range(4)]
    flood = [asyncio.create_task(d.acquire(req(tenant="a"))) for _ in range(60)]
    burst: list[asyncio.Task] = []
    await asyncio.sleep(0.01)
    taken: set[asyncio.Task] = set()

    async def turn() -> None:
        """One request ends; the slot it frees goes to the next queued one."""
        d.finished(req(tenant="a"), 10.0)
        running.pop(0).release()
        await asyncio.sleep(0.01)
        for task in [*flood, *burst]:
            if task.done() and task not in taken:
                taken.add(task)
                running.append(task.result())

    for _ in range(24):  # 6 x 4 binds of a's since it queued
        await turn()
    a_bound = sum(t.done() for t in flood)
    assert a_bound == 24
    burst.extend(asyncio.create_task(d.acquire(req(tenant="b"))) for _ in range(12))
    await asyncio.sleep(0.01)
    for _ in range(12):
        await turn()
    assert all(t.done() for t in burst)
    assert sum(t.done() for t in flood) == a_bound
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)
