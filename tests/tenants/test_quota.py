"""QuotaGate on a real Valkey: GCRA rates shared by two balancers, output tokens charged as
they stream, concurrency leases, the x-ratelimit headers, and what a Redis outage does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey
from tenants.quota import Admission, QuotaGate, openai_duration

OPEN, CLOSED = RedisDown.OPEN, RedisDown.CLOSED


def connect(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)


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


async def backlog(client: aioredis.Redis, prefix: str, tenant: str, bucket: str) -> float:
    """Seconds the bucket's theoretical arrival time is ahead of the server's clock."""
    tat = await client.get(f"{prefix}:quota:{tenant}:{bucket}")
    return max(0.0, float(tat) - await server_time(client)) if tat else 0.0


async def admit(gate: QuotaGate, quota: TenantQuota, request_id: str, *, tenant: str = "acme",
                input_tokens: int = 1, redis_down: RedisDown = CLOSED) -> Admission:
    return await gate.admit(tenant, quota, redis_down, input_tokens=input_tokens,
                            max_output_tokens=None, request_id=request_id)


# --- 1. two balancers on one Valkey, at twice the limit --------------------------------------

@pytest.mark.parametrize(("quota", "cost", "per_minute"), [
    pytest.param(TenantQuota(requests_per_minute=1200), 1, 1200, id="requests"),
    pytest.param(TenantQuota(input_tokens_per_minute=60_000), 100, 60_000, id="input-tokens"),
])
async def test_two_balancers_together_admit_what_gcra_allows(
    valkey: EmbeddedValkey, prefix: str, quota: TenantQuota, cost: int, per_minute: int,
) -> None:
    """The burst (one minute's worth) at once, then twice the rate for 3 s, alternating
    between two gates with their own clients: the units admitted are GCRA's allowance,
    burst + rate x elapsed (elapsed on the server's clock, bracketing the whole run)."""
    async with clients(valkey.url, 2) as (first, second):
        gates = [QuotaGate(first, prefix), QuotaGate(second, prefix)]
        admitted = 0

        async def offer(gate: QuotaGate, n: int) -> None:
            nonlocal admitted
            admission = await admit(gate, quota, f"r{n}", input_tokens=cost)
            if admission.allowed:
                admitted += cost
            else:
                assert admission.status == 429 and admission.retry_after_s > 0

        started = await server_time(first)
        burst = per_minute // cost
        for chunk in range(0, burst, 50):
            await asyncio.gather(*(offer(gates[n % 2], n)
                                   for n in range(chunk, min(burst, chunk + 50))))

        per_gate_period = 2 * cost / (2 * per_minute / 60)  # twice the rate, split in two
        loop = asyncio.get_running_loop()

        async def offer_steadily(gate: QuotaGate, offset: float, t0: float) -> None:
            for k in range(math.floor(3.0 / per_gate_period)):
                await asyncio.sleep(max(0.0, t0 + offset + k * per_gate_period - loop.time()))
                await offer(gate, burst + 2 * k + (offset > 0))

        t0 = loop.time()
        await asyncio.gather(offer_steadily(gates[0], 0.0, t0),
                             offer_steadily(gates[1], per_gate_period / 2, t0))
        ended = await server_time(first)

    elapsed = ended - started
    allowed = per_minute + per_minute / 60 * elapsed
    print(f"\n{quota}: admitted {admitted} units in {elapsed:.3f} s, "
          f"GCRA allows {allowed:.1f} ({admitted / allowed - 1:+.2%}); "
          f"beyond the burst: {admitted - per_minute} vs {allowed - per_minute:.1f}")
    assert abs(admitted - allowed) <= 0.02 * allowed
    assert admitted <= allowed + 1e-6  # never more than GCRA allows
    assert admitted >= allowed - 3 * cost  # the offered load kept the bucket saturated


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
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix)
        for n in range(burst):
            assert (await admit(gate, quota, f"r{n}", input_tokens=cost)).allowed, n
        refused = await admit(gate, quota, "next", input_tokens=cost)
    assert (refused.allowed, refused.status, refused.limit) == (False, 429, limit)
    assert retry_s - 0.25 < refused.retry_after_s <= retry_s
    assert refused.headers["Retry-After"] == str(math.ceil(retry_s))
    assert not refused.degraded


async def test_a_refusal_by_one_limit_charges_none_of_the_others(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=1000)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix)
        assert (await admit(gate, quota, "a", input_tokens=600)).allowed
        requests_before = await backlog(client, prefix, "acme", "requests")
        refused = await admit(gate, quota, "b", input_tokens=600)
        assert (refused.limit, refused.headers["x-ratelimit-remaining-requests"]) == \
            ("input_tokens", "59")
        assert 11.5 < refused.retry_after_s <= 12.0  # 200 tokens missing, 0.06 s each
        assert await backlog(client, prefix, "acme", "requests") <= requests_before
        assert 35.5 < await backlog(client, prefix, "acme", "input_tokens") <= 36.0  # 600 only
        small = await admit(gate, quota, "c", input_tokens=100)
    assert small.allowed and small.headers["x-ratelimit-remaining-requests"] == "58"


async def test_a_refusal_by_concurrency_charges_no_rate(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=1000, concurrent=1)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix)
        assert (await admit(gate, quota, "a", input_tokens=100)).allowed
        refused = await admit(gate, quota, "b", input_tokens=100)
        assert (refused.status, refused.limit, refused.retry_after_s) == (429, "concurrent", 1.0)
        assert refused.headers["x-ratelimit-remaining-requests"] == "59"
        assert refused.headers["x-ratelimit-remaining-tokens"] == "900"


async def test_idle_keys_expire(valkey: EmbeddedValkey, prefix: str) -> None:
    quota = TenantQuota(requests_per_minute=60, input_tokens_per_minute=6000, concurrent=3)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix, lease_s=30.0)
        assert (await admit(gate, quota, "a", input_tokens=200)).allowed
        ttl = {name: await client.pttl(f"{prefix}:quota:acme:{name}")
               for name in ("requests", "input_tokens", "concurrent")}
    assert 900 < ttl["requests"] <= 1000  # the bucket is full again one interval later
    assert 1900 < ttl["input_tokens"] <= 2000
    assert 29_000 < ttl["concurrent"] <= 30_000  # the lease


# --- 3. output tokens ------------------------------------------------------------------------

async def test_output_tokens_charged_as_they_stream_then_reconciled(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(output_tokens_per_minute=6000)  # 0.01 s per token
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix, output_batch_tokens=100, output_flush_s=60.0)
        running = await admit(gate, quota, "stream")
        assert running.allowed
        await running.charge_output(50)  # below a batch: not sent yet
        assert await backlog(client, prefix, "acme", "output_tokens") == 0.0
        await running.charge_output(6450)  # 6500 in all: 500 tokens (5 s) of debt
        assert 64.9 < await backlog(client, prefix, "acme", "output_tokens") <= 65.0
        refused = await admit(gate, quota, "next")
        assert (refused.status, refused.limit) == (429, "output_tokens")
        assert 4.9 < refused.retry_after_s <= 5.0
        assert refused.headers["Retry-After"] == "5"

        await running.finish(7000)  # 500 more than streamed: 1000 tokens of debt
        assert 69.9 < await backlog(client, prefix, "acme", "output_tokens") <= 70.0
        await running.finish(7000)  # idempotent
        await running.charge_output(1000)  # after the end: ignored
        assert 69.9 < await backlog(client, prefix, "acme", "output_tokens") <= 70.0
        refused = await admit(gate, quota, "later")
        assert 9.9 < refused.retry_after_s <= 10.0


async def test_finish_refunds_what_streaming_overcounted(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(output_tokens_per_minute=6000)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix, output_batch_tokens=100, output_flush_s=60.0)
        running = await admit(gate, quota, "stream")
        await running.charge_output(200)
        assert 1.9 < await backlog(client, prefix, "acme", "output_tokens") <= 2.0
        await running.finish(150)
        assert 1.4 < await backlog(client, prefix, "acme", "output_tokens") <= 1.5


# --- 4. concurrency --------------------------------------------------------------------------

async def test_concurrency_limit_and_finish_frees_a_slot(
    valkey: EmbeddedValkey, prefix: str,
) -> None:
    quota = TenantQuota(concurrent=2)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix)
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
        crashed = QuotaGate(client, prefix, lease_s=0.3)  # never finishes its requests
        assert (await admit(crashed, quota, "a")).allowed
        assert (await admit(crashed, quota, "b")).allowed
        assert not (await admit(crashed, quota, "c")).allowed
        await asyncio.sleep(0.35)
        assert (await admit(crashed, quota, "d")).allowed
        assert (await admit(crashed, quota, "e")).allowed


async def test_streaming_refreshes_the_lease(valkey: EmbeddedValkey, prefix: str) -> None:
    quota = TenantQuota(concurrent=2)
    async with clients(valkey.url) as (client,):
        gate = QuotaGate(client, prefix, lease_s=0.4, output_flush_s=0.1)
        streaming, silent = await admit(gate, quota, "a"), await admit(gate, quota, "b")
        for _ in range(4):
            await asyncio.sleep(0.15)
            await streaming.charge_output(1)
        # 0.6 s later the silent request's lease has ended, the streaming one's has not
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
        gate = QuotaGate(client, prefix)
        admitted = await admit(gate, quota, "a", input_tokens=100)
        refused = await admit(gate, quota, "b", input_tokens=1000)
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
    assert refused.headers["x-ratelimit-remaining-requests"] == "59"
    assert refused.headers["x-ratelimit-limit-tokens"] == "1000"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "900"
    reset = refused.headers["x-ratelimit-reset-tokens"]  # 6 s, less the time since
    assert reset == "6s" or reset.startswith("5.9"), reset
    assert refused.headers["Retry-After"] == "6"
    assert 5.75 < refused.retry_after_s <= 6.0


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
        client = aioredis.Redis.from_url(server.url, socket_timeout=0.2,
                                         socket_connect_timeout=0.2)
        gate = QuotaGate(client, prefix, local_share=0.5, retry_s=0.2)
        assert not (await admit(gate, quota, "before", redis_down=OPEN)).degraded

        server.stop()
        closed = await admit(gate, quota, "closed", redis_down=CLOSED)
        assert (closed.allowed, closed.status, closed.limit) == (False, 503, "state_unavailable")
        assert (closed.retry_after_s, closed.headers) == (1.0, {"Retry-After": "1"})

        # local limits: half of 60/min, so a burst of 30, then one per 2 s
        local = [await admit(gate, quota, f"o{n}", redis_down=OPEN) for n in range(31)]
        assert all(a.allowed and a.degraded for a in local[:30])
        refused = local[30]
        assert (refused.status, refused.limit, refused.degraded) == (429, "requests", True)
        assert 1.9 < refused.retry_after_s <= 2.0
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
    try:
        started = loop.time()
        closed = await admit(gate, TenantQuota(requests_per_minute=60), "a")
        assert (closed.status, closed.limit) == (503, "state_unavailable")
        assert loop.time() - started < 0.5
        opened = await admit(gate, TenantQuota(requests_per_minute=60), "b", redis_down=OPEN)
        assert opened.allowed and opened.degraded
    finally:
        silent.close()
        await client.aclose()
