"""QuotaGate on a real Valkey: GCRA rates shared by two balancers through slices of budget
admitted locally (no round trip while a slice is held, topped up in the background, returned
when unspent), output tokens charged as they stream, concurrency leases, the x-ratelimit
headers, and what a Redis outage does."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey
from tenants.quota import Admission, QuotaGate, SliceRules, openai_duration

OPEN, CLOSED = RedisDown.OPEN, RedisDown.CLOSED
# The Redis bound of gates (and the clients' socket timeouts) in tests of quota arithmetic:
# a loaded machine can stall a process for half a second, and a call given up reads as
# Redis down. The tests of the bound itself set their own.
PATIENT_S = 5.0
# The life of leases and slices in tests of what happens when they end: longer than this
# machine stalls a process between two calls (1.5 s seen under load), so that none ends
# before the test means it to.
OUTLIVES_STALLS_S = 3.0


def connect(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, socket_timeout=PATIENT_S,
                                   socket_connect_timeout=PATIENT_S)


def gate_on(client: aioredis.Redis, prefix: str, **options: Any) -> QuotaGate:
    """A gate that waits for Redis as long as ``PATIENT_S``."""
    return QuotaGate(client, prefix, timeout_s=PATIENT_S, max_timeout_s=PATIENT_S, **options)


@contextlib.asynccontextmanager
async def clients(url: str, count: int = 1) -> AsyncIterator[list[aioredis.Redis]]:
    made = [connect(url) for _ in range(count)]
    try:
        yield made
    finally:
        for client in made:
            await client.aclose()


async def server_time(client: aioredis.Redis) -> float:
    seconds, micros = await client.time()
    return seconds + micros / 1e6


async def server_time_here(client: aioredis.Redis) -> float:
    """The server's clock, checked to be this machine's wall clock (the embedded Valkey runs
    here): then a ``time.time()`` taken between two calls is a reading of the server's
    clock too, without a round trip."""
    before = time.time()
    now = await server_time(client)
    assert before - 1e-5 <= now <= time.time() + 1e-5, "the server's clock is not ours"
    return now


async def backlog(client: aioredis.Redis, prefix: str, tenant: str, bucket: str) -> float:
    """Seconds the bucket's theoretical arrival time is ahead of the server's clock."""
    tat = await client.get(f"{prefix}:quota:{{{tenant}}}:{bucket}")
    return max(0.0, float(tat) - await server_time(client)) if tat else 0.0


class CountingRedis(aioredis.Redis):
    """A client that counts the scripts it runs: the gate's round trips."""

    calls = 0

    async def evalsha(self, *args: object) -> object:
        self.calls += 1
        return await super().evalsha(*args)

    async def eval(self, *args: object) -> object:
        self.calls += 1
        return await super().eval(*args)


def counting(url: str) -> CountingRedis:
    return CountingRedis.from_url(url, socket_timeout=PATIENT_S,
                                  socket_connect_timeout=PATIENT_S)


async def less_time_since(client: aioredis.Redis, since: float, figure: float,
                          ) -> tuple[float, float]:
    """The bounds of a ``figure`` of seconds "less the time since" ``since`` (the server's
    clock): the time since is measured, not assumed short."""
    return figure - (await server_time(client) - since) - 1e-3, figure


def slice_bound(limit: float, cost: float) -> float:
    """What one gate may hold of a bucket: under its low-water mark plus one slice."""
    rules = SliceRules()
    return rules.low(limit, cost) + rules.size(limit, cost)


async def room(client: aioredis.Redis, prefix: str, tenant: str, bucket: str,
               per_minute: float) -> tuple[float, float]:
    """The server's time, and the units the bucket has room for then."""
    tat = await client.get(f"{prefix}:quota:{{{tenant}}}:{bucket}")
    now = await server_time(client)
    backlog = max(0.0, float(tat) - now) if tat else 0.0
    return now, (60.0 - backlog) * per_minute / 60.0


async def admit(gate: QuotaGate, quota: TenantQuota, request_id: str, *, tenant: str = "acme",
                input_tokens: int = 1, redis_down: RedisDown = CLOSED) -> Admission:
    return await gate.admit(tenant, quota, redis_down, input_tokens=input_tokens,
                            max_output_tokens=None, request_id=request_id)


# --- 1. two balancers on one Valkey, at twice the limit --------------------------------------

@pytest.mark.parametrize(("quota", "cost", "per_minute", "bucket"), [
    pytest.param(TenantQuota(requests_per_minute=1200), 1, 1200, "requests", id="requests"),
    pytest.param(TenantQuota(input_tokens_per_minute=60_000), 100, 60_000, "input_tokens",
                 id="input-tokens"),
])
async def test_two_balancers_together_admit_what_gcra_allows(
    valkey: EmbeddedValkey, prefix: str, quota: TenantQuota, cost: int, per_minute: int,
    bucket: str,
) -> None:
    """Both gates already hold slices; then the rest of the burst at once, then twice the
    rate for 3 s, alternating between the gates (their own clients): a schedule that starts
    with the burst, so the offers also ask for what the bucket refilled while the burst
    was admitted (long, on a loaded machine), and catch up after a stall. Over the measured
    interval the units admitted are GCRA's allowance (the bucket's room at the start +
    rate x elapsed, on the server's clock), give or take what the gates hold: at most the
    slices held at the start above it, at most those held at the end below it, each gate
    holding less than its low-water mark plus one slice. Below it, the allowance counts up
    to the time the last offer was due only: the offers ask for nothing after it (a loaded
    machine makes overdue offers late, and can stand still before it reads the clock)."""
    async with clients(valkey.url, 2) as (first, second):
        gates = [gate_on(first, prefix), gate_on(second, prefix)]
        admitted = 0

        async def offer(gate: QuotaGate, n: int) -> None:
            nonlocal admitted
            admission = await admit(gate, quota, f"r{n}", input_tokens=cost)
            if admission.allowed:
                admitted += cost
            else:
                assert admission.status == 429 and admission.retry_after_s > 0

        for n, gate in enumerate(gates):  # each gate takes its first slices
            assert (await admit(gate, quota, f"w{n}", input_tokens=cost)).allowed
        for gate in gates:
            await gate.drain()
        held_at_start = sum(gate.outstanding("acme")[bucket] for gate in gates)
        assert held_at_start > 0
        loop = asyncio.get_running_loop()
        started, room_at_start = await room(first, prefix, "acme", bucket, per_minute)
        t0, wall0 = loop.time(), time.time()  # the schedule's start (the server's clock: wall0)

        burst = math.ceil((room_at_start + held_at_start) / cost)
        for chunk in range(0, burst, 50):
            await asyncio.gather(*(offer(gates[n % 2], n)
                                   for n in range(chunk, min(burst, chunk + 50))))

        per_gate_period = 2 * cost / (2 * per_minute / 60)  # twice the rate, split in two
        slots = math.floor((loop.time() - t0 + 3.0) / per_gate_period)  # the burst's time + 3 s

        async def offer_steadily(gate: QuotaGate, offset: float) -> None:
            for k in range(slots):
                await asyncio.sleep(max(0.0, t0 + offset + k * per_gate_period - loop.time()))
                await offer(gate, burst + 2 * k + (offset > 0))

        await asyncio.gather(offer_steadily(gates[0], 0.0),
                             offer_steadily(gates[1], per_gate_period / 2))
        last_due = wall0 + per_gate_period / 2 + (slots - 1) * per_gate_period
        ended = await server_time_here(first)
        for gate in gates:
            await gate.drain()
        held = [gate.outstanding("acme")[bucket] for gate in gates]

    elapsed = ended - started
    allowed = room_at_start + per_minute / 60 * elapsed
    loaded = room_at_start + per_minute / 60 * (last_due - started)  # while offered
    print(f"\n{quota}: admitted {admitted} units in {elapsed:.3f} s, GCRA allows "
          f"{allowed:.1f} ({admitted / allowed - 1:+.2%}), {loaded:.1f} up to the last offer; "
          f"slices held at the start {held_at_start:g}, at the end {held} (bound "
          f"{slice_bound(per_minute, cost):g} per gate)")
    assert all(units < slice_bound(per_minute, cost) for units in held)
    # jointly within 2 % of the limit
    assert -0.02 * per_minute <= admitted - loaded and admitted - allowed <= 0.02 * per_minute
    assert admitted <= allowed + held_at_start + 1e-6  # never more than the slices held
    assert admitted >= loaded - sum(held) - 3 * cost  # the load kept the bucket saturated


async def test_two_balancers_together_stream_what_the_output_bucket_allows(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """Output tokens are charged after the fact: requests of 100 tokens each, offered as
    fast as each gate admits them until the bucket is in debt, then at twice the rate for
    3 s. The tokens streamed are GCRA's allowance plus the debt the last admitted streams
    ran up: at most one request per gate beyond what it held (slices of 150 tokens). Below
    it, the allowance counts up to the time the last offer was due only (see the test
    above)."""
    per_minute, tokens = 60_000, 100
    quota = TenantQuota(output_tokens_per_minute=per_minute)
    async with clients(valkey.url, 2) as (first, second):
        gates = [gate_on(first, prefix), gate_on(second, prefix)]
        streamed = 0

        async def offer(gate: QuotaGate, n: int) -> bool:
            nonlocal streamed
            admission = await admit(gate, quota, f"r{n}")
            if admission.allowed:
                await admission.finish(tokens)
                streamed += tokens
            else:
                assert admission.limit == "output_tokens" and admission.retry_after_s > 0
            return admission.allowed

        async def until_refused(gate: QuotaGate, side: int) -> None:
            n = side
            while await offer(gate, n):
                n += 2
                await asyncio.sleep(0)

        started = await server_time(first)
        await asyncio.gather(until_refused(gates[0], 0), until_refused(gates[1], 1))

        period = 2 * tokens / (2 * per_minute / 60)  # per gate, twice the rate in all
        loop = asyncio.get_running_loop()

        slots = math.floor(3.0 / period)

        async def offer_steadily(gate: QuotaGate, offset: float, t0: float) -> None:
            for k in range(slots):
                await asyncio.sleep(max(0.0, t0 + offset + k * period - loop.time()))
                await offer(gate, 100_000 + 2 * k + (offset > 0))

        t0, wall0 = loop.time(), time.time()  # the schedule's start (the server's clock: wall0)
        await asyncio.gather(offer_steadily(gates[0], 0.0, t0),
                             offer_steadily(gates[1], period / 2, t0))
        last_due = wall0 + period / 2 + (slots - 1) * period
        ended = await server_time_here(first)
        for gate in gates:
            await gate.aclose()  # what is held goes back, what is owed is charged
        debt = await backlog(first, prefix, "acme", "output_tokens") - 60.0

    allowed = per_minute + per_minute / 60 * (ended - started)
    loaded = per_minute + per_minute / 60 * (last_due - started)  # while offered
    print(f"\nstreamed {streamed} tokens, GCRA allows {allowed:.0f} "
          f"({streamed / allowed - 1:+.2%}), {loaded:.0f} up to the last offer, "
          f"{debt * per_minute / 60:+.0f} tokens of debt")
    assert -0.02 * per_minute <= streamed - loaded and streamed - allowed <= 0.02 * per_minute
    assert streamed <= allowed + 2 * tokens  # one request beyond what each gate held
    assert streamed >= loaded - 2 * slice_bound(per_minute, 1) - 3 * tokens


# --- 1b. slices: local admissions, background top-ups, returns ------------------------------

async def test_an_admission_needs_no_round_trip_while_a_slice_is_held(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """Request and token limits: after the first request (which takes the slices), requests
    are decided in process and their finish sends nothing on the request path."""
    quota = TenantQuota(requests_per_minute=60_000, input_tokens_per_minute=6_000_000,
                        output_tokens_per_minute=6_000_000)  # slices: 150 requests, 15000 tokens
    # of each
    client = counting(valkey.url)
    now = 1_000_000.0  # the gate's clock stands still, so its view of the buckets does too
    try:
        gate = gate_on(client, prefix, clock=lambda: now)
        first = await admit(gate, quota, "first", input_tokens=100)
        assert first.allowed and client.calls >= 1
        await first.finish(20)
        await gate.drain()
        before = client.calls
        remaining = []
        for n in range(20):
            admission = await admit(gate, quota, f"r{n}", input_tokens=100)
            assert admission.allowed and not admission.degraded
            remaining.append(int(admission.headers["x-ratelimit-remaining-requests"]))
            await admission.finish(20)  # owed, sent in the background
            assert client.calls == before
        steps = [earlier - later for earlier, later in itertools.pairwise(remaining)]
        assert steps == [1] * 19  # counted down locally
        await gate.drain()
        assert client.calls == before  # the output tokens too came out of a slice
        assert gate.outstanding("acme") == {
            "requests": 150 - 20, "input_tokens": 15_000 - 2000, "output_tokens": 15_000 - 420}
    finally:
        await client.aclose()


async def test_a_concurrency_limit_costs_one_round_trip_and_none_at_finish(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60_000, concurrent=5)
    client = counting(valkey.url)
    try:
        gate = gate_on(client, prefix)
        await (await admit(gate, quota, "warm")).finish(0)  # the server has the script
        for n in range(3):
            before = client.calls
            admission = await admit(gate, quota, f"r{n}")
            assert admission.allowed and client.calls == before + 1
            await admission.finish(0)
            assert client.calls == before + 1  # the release goes later
        await gate.drain()
        assert await client.zcard(f"{prefix}:quota:{{acme}}:concurrent") == 0  # all released
    finally:
        await client.aclose()


async def test_slices_are_topped_up_in_the_background_before_they_run_out(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """1200 requests a minute: slices of 3 (0.25 %), topped up below 1.5 held."""
    quota = TenantQuota(requests_per_minute=1200)
    client = counting(valkey.url)
    try:
        gate = gate_on(client, prefix)
        started = await server_time(client)
        assert (await admit(gate, quota, "a")).allowed  # takes 1, and a slice of 3
        assert gate.outstanding("acme") == {"requests": 3}
        await gate.drain()
        calls = client.calls
        assert (await admit(gate, quota, "b")).allowed
        assert gate.outstanding("acme") == {"requests": 2}  # above low water: no top-up
        await gate.drain()
        assert client.calls == calls
        assert (await admit(gate, quota, "c")).allowed
        assert gate.outstanding("acme") == {"requests": 1}  # the top-up is under way
        assert client.calls == calls
        await gate.drain()
        assert (client.calls, gate.outstanding("acme")) == (calls + 1, {"requests": 4})
        # charged in Redis: 1 + 3 + 3 requests of 0.05 s each, less the time since
        charged = await backlog(client, prefix, "acme", "requests")
        low, high = await less_time_since(client, started, 0.35)
        assert low < charged <= high
    finally:
        await client.aclose()


async def test_a_request_waits_for_the_top_up_under_way_rather_than_being_refused(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """60 a minute, slices of 1: one gate admits the whole burst back to back, each request
    either spending a slice or waiting for the one on its way, and the next is refused
    (unless the burst took a second or more: then one more per second it took)."""
    quota = TenantQuota(requests_per_minute=60)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        assert all([(await admit(gate, quota, f"r{n}")).allowed for n in range(60)])
        refilled = 0
        while (refused := await admit(gate, quota, f"next{refilled}")).allowed:
            refilled += 1
        elapsed = await server_time(client) - started
        assert refilled <= math.floor(elapsed), (refilled, elapsed)
        assert (refused.status, refused.limit) == (429, "requests")
        assert gate.outstanding("acme") == {"requests": 0}


async def test_unspent_slices_go_back_when_they_expire(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=6000)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix, slices=SliceRules(ttl_s=OUTLIVES_STALLS_S))
        started = await server_time(client)
        assert (await admit(gate, quota, "a", input_tokens=100)).allowed
        assert gate.outstanding("acme") == {"requests": 1, "input_tokens": 100}
        held = [await backlog(client, prefix, "acme", bucket)
                for bucket in ("requests", "input_tokens")]  # 1 + 1 held; 100 + 100
        low, high = await less_time_since(client, started, 2.0)
        assert all(low < seconds <= high for seconds in held), held
        await asyncio.sleep(OUTLIVES_STALLS_S + 0.2)  # the gate's timer returns them first
        await gate.drain()
        assert gate.outstanding("acme") == {"requests": 0, "input_tokens": 0}
        # what was spent is still charged (less the time since); what was held came back
        spent = [await backlog(client, prefix, "acme", bucket)
                 for bucket in ("requests", "input_tokens")]
        low, high = await less_time_since(client, started, 1.0)
        assert all(low < seconds <= high for seconds in spent), spent


async def test_close_returns_what_is_held_and_settles_what_is_owed(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(input_tokens_per_minute=60_000, output_tokens_per_minute=6000)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        running = await admit(gate, quota, "a", input_tokens=1000)
        # slices: one request's input tokens; 0.25 % of the output bucket
        assert gate.outstanding("acme") == {"input_tokens": 1000, "output_tokens": 15}
        charged = await backlog(client, prefix, "acme", "input_tokens")
        low, high = await less_time_since(client, started, 2.0)
        assert low < charged <= high
        await running.charge_output(30)  # 15 of them held, 15 owed: below a batch
        await gate.aclose()
        assert gate.outstanding("acme") == {"input_tokens": 0, "output_tokens": 0}
        charged = await backlog(client, prefix, "acme", "input_tokens")
        low, high = await less_time_since(client, started, 1.0)
        assert low < charged <= high
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 0.3)  # 30
        assert low < charged <= high


async def test_a_refusal_after_another_gate_emptied_the_bucket_waits_for_the_shared_bucket(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """This gate last saw a bucket with room; the other gate emptied it since. Once its own
    slice is spent, it asks Redis, and ``Retry-After`` is the shared bucket's."""
    quota = TenantQuota(requests_per_minute=60)
    first, second = counting(valkey.url), counting(valkey.url)
    try:
        here, there = gate_on(first, prefix), gate_on(second, prefix)
        started = await server_time(first)  # the bucket's first charge is after this
        assert (await admit(here, quota, "a")).allowed  # takes 1, holds 1
        await here.drain()
        assert here.outstanding("acme") == {"requests": 1}
        for n in range(60):
            if not (await admit(there, quota, f"t{n}")).allowed:
                break
        await there.drain()
        assert (await admit(here, quota, "b")).allowed  # its own slice
        calls = first.calls
        refused = await admit(here, quota, "c")
        assert first.calls > calls  # its view was stale: Redis refused
        assert (refused.status, refused.limit) == (429, "requests")
        low, high = await less_time_since(first, started, 1.0)  # one request at 60/min
        assert low < refused.retry_after_s <= high
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        calls = first.calls
        again = await admit(here, quota, "d")
        assert (again.limit, first.calls) == ("requests", calls)  # refused on what it saw
        assert again.retry_after_s <= refused.retry_after_s
    finally:
        await first.aclose()
        await second.aclose()


async def test_output_debt_run_up_at_another_gate_refuses_here(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """100 output tokens a minute; 60 streamed at each gate. The first gate last saw room for
    40, less than its last request produced: it asks Redis, which is in debt."""
    quota = TenantQuota(output_tokens_per_minute=100)
    async with clients(valkey.url, 2) as (first, second):
        here, there = gate_on(first, prefix), gate_on(second, prefix)
        started = await server_time(first)
        for gate in (here, there):
            running = await admit(gate, quota, "r")
            assert running.allowed
            await running.finish(60)
            await gate.drain()
        refused = await admit(here, quota, "next")
        assert (refused.status, refused.limit) == (429, "output_tokens")
        low, high = await less_time_since(first, started, 12.0)  # 20 tokens at 0.6 s each
        assert low < refused.retry_after_s <= high


# --- 2. GCRA table ---------------------------------------------------------------------------

@pytest.mark.parametrize(("quota", "cost", "burst", "limit", "retry_s"), [
    pytest.param(TenantQuota(requests_per_minute=60), 1, 60, "requests", 1.0,
                 id="requests-60/min"),
    pytest.param(TenantQuota(input_tokens_per_minute=600), 100, 6, "input_tokens", 10.0,
                 id="input-tokens-whole-requests"),
    pytest.param(TenantQuota(input_tokens_per_minute=1000), 300, 3, "input_tokens", 12.0,
                 id="input-tokens-partial-room"),
    pytest.param(TenantQuota(input_tokens_per_minute=1000), 1500, 1, "input_tokens", 90.0,
                 id="oversized-request-admitted-into-a-full-bucket"),
    pytest.param(TenantQuota(requests_per_minute=30, input_tokens_per_minute=6000), 100, 30,
                 "requests", 2.0, id="two-limits-requests-first"),
])
async def test_gcra_burst_then_refusal_with_retry_after(
    valkey: EmbeddedValkey, prefix: str, quota: TenantQuota, cost: int, burst: int, limit: str,
    retry_s: float,
) -> None:
    """The burst, then a refusal; a burst that took long (a loaded machine) admits what the
    bucket refilled meanwhile, and no more."""
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        admitted = 0
        while (admission := await admit(gate, quota, f"r{admitted}", input_tokens=cost)).allowed:
            admitted += 1
            assert admitted <= 2 * burst + 10, "the bucket never refused"
        refused = admission
        elapsed = await server_time(client) - started
    per_minute = quota.requests_per_minute if limit == "requests" else \
        quota.input_tokens_per_minute
    assert per_minute is not None
    refilled = math.floor(elapsed * per_minute / 60 / (1 if limit == "requests" else cost))
    assert burst <= admitted <= burst + refilled, (admitted, elapsed)
    assert (refused.allowed, refused.status, refused.limit) == (False, 429, limit)
    assert retry_s - elapsed - 1e-3 < refused.retry_after_s <= retry_s
    assert refused.headers["Retry-After"] == str(math.ceil(refused.retry_after_s))
    assert not refused.degraded


async def test_a_refusal_by_one_limit_charges_none_of_the_others(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=1000)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        assert (await admit(gate, quota, "a", input_tokens=600)).allowed
        await gate.drain()
        requests_before = await backlog(client, prefix, "acme", "requests")
        held = gate.outstanding("acme")
        refused = await admit(gate, quota, "b", input_tokens=600)
        low, high = await less_time_since(client, started, 12.0)  # 200 tokens, 0.06 s each
        assert refused.limit == "input_tokens"
        # 59 requests left, and one more for each second since
        assert 59 <= int(refused.headers["x-ratelimit-remaining-requests"]) <= 59 + high - low
        assert low < refused.retry_after_s <= high
        await gate.drain()
        assert gate.outstanding("acme") == held  # nothing spent
        assert await backlog(client, prefix, "acme", "requests") <= requests_before
        spent = await backlog(client, prefix, "acme", "input_tokens") - held["input_tokens"] * 0.06
        low, high = await less_time_since(client, started, 36.0)
        assert low < spent <= high  # 600 only: the rest of the bucket's charge is held
        small = await admit(gate, quota, "c", input_tokens=100)
        low, high = await less_time_since(client, started, 1.0)
    assert small.allowed
    assert 58 <= int(small.headers["x-ratelimit-remaining-requests"]) <= 58 + high - low


async def test_a_refusal_by_concurrency_charges_no_rate(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=1000, concurrent=1)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        assert (await admit(gate, quota, "a", input_tokens=100)).allowed
        refused = await admit(gate, quota, "b", input_tokens=100)
        since = await server_time(client) - started
        assert (refused.status, refused.limit, refused.retry_after_s) == (429, "concurrent", 1.0)
        # what "a" left, plus what refilled since: 1 request a second, 1 token each 0.06 s
        remaining = refused.headers
        assert 59 <= int(remaining["x-ratelimit-remaining-requests"]) <= 59 + since / 1.0
        assert 900 <= int(remaining["x-ratelimit-remaining-tokens"]) <= 900 + since / 0.06


async def test_idle_keys_expire(valkey: EmbeddedValkey, prefix: str) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=6000, concurrent=3)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix, lease_s=30.0)
        started = await server_time(client)
        assert (await admit(gate, quota, "a", input_tokens=200)).allowed
        ttl = {name: await client.pttl(f"{prefix}:quota:{{acme}}:{name}") / 1000
               for name in ("requests", "input_tokens", "concurrent")}
        figures = {"requests": 1.0,  # the bucket is full again one interval later
                   "input_tokens": 2.0, "concurrent": 30.0}  # the lease
        bounds = {name: await less_time_since(client, started, figure)
                  for name, figure in figures.items()}
    assert all(bounds[name][0] < ttl[name] <= bounds[name][1] for name in ttl), (ttl, bounds)


# --- 3. output tokens ------------------------------------------------------------------------

# slices of 0.6 tokens of 6000 a minute: too small to slice, so every token is owed and
# these tests see the batching alone
UNSLICED_OUTPUT = SliceRules(fraction=1e-4)


async def test_output_tokens_charged_as_they_stream_then_reconciled(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(output_tokens_per_minute=6000)  # 0.01 s per token
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix, output_batch_tokens=100, output_flush_s=60.0,
                         slices=UNSLICED_OUTPUT)
        running = await admit(gate, quota, "stream")
        assert running.allowed
        await running.charge_output(50)  # below a batch: not sent yet
        assert await backlog(client, prefix, "acme", "output_tokens") == 0.0
        started = await server_time(client)
        await running.charge_output(6450)  # 6500 in all: 500 tokens (5 s) of debt
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 65.0)
        assert low < charged <= high
        refused = await admit(gate, quota, "next")
        assert (refused.status, refused.limit) == (429, "output_tokens")
        low, high = await less_time_since(client, started, 5.0)
        assert low < refused.retry_after_s <= high
        assert refused.headers["Retry-After"] == str(math.ceil(refused.retry_after_s))

        await running.finish(7000)  # 500 more than streamed: 1000 tokens of debt
        await gate.drain()  # finish sends them in the background
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 70.0)
        assert low < charged <= high
        await running.finish(7000)  # idempotent
        await running.charge_output(1000)  # after the end: ignored
        await gate.drain()
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 70.0)
        assert low < charged <= high
        refused = await admit(gate, quota, "later")
        low, high = await less_time_since(client, started, 10.0)
        assert low < refused.retry_after_s <= high


async def test_finish_refunds_what_streaming_overcounted(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(output_tokens_per_minute=6000)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix, output_batch_tokens=100, output_flush_s=60.0,
                         slices=UNSLICED_OUTPUT)
        running = await admit(gate, quota, "stream")
        started = await server_time(client)
        await running.charge_output(200)
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 2.0)
        assert low < charged <= high
        await running.finish(150)
        await gate.drain()
        charged = await backlog(client, prefix, "acme", "output_tokens")
        low, high = await less_time_since(client, started, 1.5)
        assert low < charged <= high


# --- 4. concurrency --------------------------------------------------------------------------

async def test_concurrency_limit_and_finish_frees_a_slot(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(concurrent=2)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        first, second = await admit(gate, quota, "a"), await admit(gate, quota, "b")
        assert first.allowed and second.allowed
        third = await admit(gate, quota, "c")
        assert (third.status, third.limit, third.headers["Retry-After"]) == \
            (429, "concurrent", "1")
        await first.finish(0)
        await first.finish(0)  # idempotent: frees one slot, once
        assert (await admit(gate, quota, "d")).allowed
        assert not (await admit(gate, quota, "e")).allowed


async def test_an_expired_lease_frees_its_slot(valkey: EmbeddedValkey, prefix: str) -> None:
    quota = TenantQuota(concurrent=2)
    async with clients(valkey.url) as (client,):
        crashed = gate_on(client, prefix, lease_s=OUTLIVES_STALLS_S)  # never finishes them
        assert (await admit(crashed, quota, "a")).allowed
        assert (await admit(crashed, quota, "b")).allowed
        assert not (await admit(crashed, quota, "c")).allowed
        await asyncio.sleep(OUTLIVES_STALLS_S + 0.05)
        assert (await admit(crashed, quota, "d")).allowed
        assert (await admit(crashed, quota, "e")).allowed


async def test_an_admission_given_up_while_redis_decides_gives_back_what_it_took(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    """The client leaves while the gate waits for Redis: the lease Redis then adds is
    released, and the units it charged are held for the next request."""
    slots = TenantQuota(concurrent=1)
    rates = TenantQuota(requests_per_minute=60)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        for quota in (slots, rates):
            waiting = asyncio.create_task(admit(gate, quota, "gone"))
            await asyncio.sleep(0)  # the call to Redis is under way
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            await gate.drain()
        assert await client.zcard(f"{prefix}:quota:{{acme}}:concurrent") == 0
        assert (await admit(gate, slots, "next")).allowed
        assert gate.outstanding("acme") == {"requests": 2}  # its own, and the slice


async def test_streaming_refreshes_the_lease(valkey: EmbeddedValkey, prefix: str) -> None:
    """Each charge of a running stream's output (here every 0.3 s; at most one per
    ``output_flush_s``) moves its lease's end to a lease after the charge, on the server's
    clock; a silent request's lease stays as it was. Once it has ended, a new request takes
    its slot, and the streaming one still holds its own."""
    quota = TenantQuota(concurrent=2)
    lease_s = OUTLIVES_STALLS_S
    leases = f"{prefix}:quota:{{acme}}:concurrent"
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix, lease_s=lease_s, output_flush_s=0.1)
        streaming, silent = await admit(gate, quota, "a"), await admit(gate, quota, "b")
        silent_ends = await client.zscore(leases, "b")
        assert silent_ends is not None
        refreshes = 0
        while await server_time(client) <= silent_ends:
            await asyncio.sleep(0.3)
            before = await server_time(client)
            await streaming.charge_output(1)
            after = await server_time(client)
            ends = await client.zscore(leases, "a")
            assert ends is not None and before + lease_s - 1e-6 <= ends <= after + lease_s + 1e-6
            refreshes += 1
        assert refreshes >= 2
        assert await client.zscore(leases, "b") == silent_ends  # never moved, and past
        assert (await admit(gate, quota, "c")).allowed
        assert not (await admit(gate, quota, "d")).allowed
        await silent.finish(0)


# --- 5. headers ------------------------------------------------------------------------------

async def test_rate_limit_headers_when_admitted_and_refused(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=1000,
                        output_tokens_per_minute=6000)
    async with clients(valkey.url) as (client,):
        gate = gate_on(client, prefix)
        started = await server_time(client)
        admitted = await admit(gate, quota, "a", input_tokens=100)
        refused = await admit(gate, quota, "b", input_tokens=1000)
        low, high = await less_time_since(client, started, 6.0)
    assert admitted.headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        # the token limit with the smallest share left: input (900/1000), not output
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "900",
        "x-ratelimit-reset-tokens": "6s",
    }
    assert refused.limit == "input_tokens"
    # as "a" left them, plus what refilled since: 1 request a second, 1 token each 0.06 s
    assert 59 <= int(refused.headers["x-ratelimit-remaining-requests"]) <= 59 + (high - low)
    assert refused.headers["x-ratelimit-limit-tokens"] == "1000"
    assert 900 <= int(refused.headers["x-ratelimit-remaining-tokens"]) <= \
        900 + (high - low) / 0.06
    reset = refused.headers["x-ratelimit-reset-tokens"]  # 6 s, less the time since
    assert reset.endswith("s") and low - 1e-3 <= float(reset.removesuffix("s")) <= high, reset
    assert refused.headers["Retry-After"] == str(math.ceil(refused.retry_after_s))
    assert low < refused.retry_after_s <= high


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0s"), (0.0004, "1ms"), (0.12, "120ms"), (1.0, "1s"), (1.5, "1.5s"),
    (59.9991, "1m0s"), (360.0, "6m0s"), (3661.25, "1h1m1.25s"),
])
def test_openai_duration(seconds: float, text: str) -> None:
    assert openai_duration(seconds) == text


async def test_no_limits_no_round_trip(prefix: str) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)  # nothing
    gate = QuotaGate(client, prefix)
    admission = await admit(gate, TenantQuota(), "a")
    assert (admission.allowed, admission.headers, admission.degraded) == (True, {}, False)
    await admission.finish(10)
    await client.aclose()


# --- 6. Redis outage -------------------------------------------------------------------------

async def test_outage_closed_refuses_open_uses_local_limits_then_redis_again(
    prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tenants.quota")
    quota = TenantQuota(requests_per_minute=60)
    server = EmbeddedValkey().start()
    try:
        client = connect(server.url)
        gate = gate_on(client, prefix, local_share=0.5, retry_s=0.2)
        assert not (await admit(gate, quota, "before", redis_down=OPEN)).degraded
        assert gate.outstanding("acme") == {"requests": 1}  # a slice of one request

        server.stop()
        # the gate does not know yet: the request is admitted from its slice, budget Redis
        # had granted, and the top-up that follows finds Redis down
        held = await admit(gate, quota, "held", redis_down=CLOSED)
        assert held.allowed and not held.degraded
        await gate.drain()
        assert not gate.reachable
        closed = await admit(gate, quota, "closed", redis_down=CLOSED)
        assert (closed.allowed, closed.status, closed.limit) == (False, 503, "state_unavailable")
        assert (closed.retry_after_s, closed.headers) == (1.0, {"Retry-After": "1"})

        # local limits: half of 60/min, so a burst of 30, then one per 2 s
        started = time.time()  # the gate's clock
        local = [await admit(gate, quota, f"o{n}", redis_down=OPEN) for n in range(31)]
        since = time.time() - started
        assert all(a.allowed and a.degraded for a in local[:30])
        refused = local[30]
        assert (refused.status, refused.limit, refused.degraded) == (429, "requests", True)
        assert 2.0 - since - 1e-3 < refused.retry_after_s <= 2.0  # less the time since
        assert refused.headers["x-ratelimit-limit-requests"] == "30"

        slots = TenantQuota(concurrent=4)  # half of it locally: 2
        one, two = [await admit(gate, slots, r, tenant="beta", redis_down=OPEN)
                    for r in ("s1", "s2")]
        assert one.allowed and two.allowed and one.degraded
        assert (await admit(gate, slots, "s3", tenant="beta", redis_down=OPEN)).limit == \
            "concurrent"
        await one.finish(0)
        assert (await admit(gate, slots, "s4", tenant="beta", redis_down=OPEN)).allowed

        lost = [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(lost) == 1  # the switch is logged once, not per request
        assert not gate.reachable

        server.start()  # same port; an empty server, whose script cache is empty too
        deadline = asyncio.get_running_loop().time() + 2.0
        back = await admit(gate, quota, "after", redis_down=OPEN)
        while back.degraded and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            back = await admit(gate, quota, "after", redis_down=OPEN)
        assert back.allowed and not back.degraded and gate.reachable
        assert back.headers["x-ratelimit-limit-requests"] == "60"
        assert back.headers["x-ratelimit-remaining-requests"] == "59"
        assert any("reachable again" in r.getMessage() for r in caplog.records)
        await client.aclose()
    finally:
        server.stop()


async def test_a_server_that_never_answers_is_down_after_the_gate_timeout(prefix: str) -> None:
    """The caller's client has no timeout at all: the gate's own bound still holds."""
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)  # reads every command, answers none
        writer.close()

    silent = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=None,
                            socket_connect_timeout=None)
    gate = QuotaGate(client, prefix, timeout_s=0.1)
    loop = asyncio.get_running_loop()
    stalled = 0.0  # time this process's loop stood still, which the bound does not count
    last = loop.time()  # the watcher's last wake-up

    async def watch() -> None:
        nonlocal stalled, last
        while True:
            await asyncio.sleep(0.01)
            now = loop.time()
            stalled += max(0.0, now - last - 0.01)  # every wake-up later than asked
            last = now

    watcher = asyncio.create_task(watch())
    try:
        started = last = loop.time()  # a stall before the watcher first runs counts too
        closed = await admit(gate, TenantQuota(requests_per_minute=60), "a")
        ended = loop.time()
        stalled += max(0.0, ended - last - 0.01)  # and one after its last wake-up
        assert (closed.status, closed.limit) == (503, "state_unavailable")
        assert ended - started < 0.5 + stalled
        opened = await admit(gate, TenantQuota(requests_per_minute=60), "b", redis_down=OPEN)
        assert opened.allowed and opened.degraded
    finally:
        watcher.cancel()
        silent.close()
        await client.aclose()
