"""Input tokens are charged at admission on an estimate and settled with the engine's count
when the request ends: a prompt that read fewer tokens gives them back, one that read more
owes them (the gate on a real Valkey, and the local limiter it falls back on)."""

from __future__ import annotations

import redis.asyncio as aioredis

from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey
from tenants.local_limits import LocalLimits
from tenants.quota import Admission, QuotaGate

QUOTA = TenantQuota(input_tokens_per_minute=6000)  # 100 a second, 6000 at once


async def admit(gate: QuotaGate, request_id: str, input_tokens: int) -> Admission:
    return await gate.admit("acme", QUOTA, RedisDown.CLOSED, input_tokens=input_tokens,
                            max_output_tokens=None, request_id=request_id)


async def test_the_engines_count_settles_the_input_charge(valkey: EmbeddedValkey,
                                                          prefix: str) -> None:
    client = aioredis.Redis.from_url(valkey.url, socket_timeout=5, socket_connect_timeout=5)
    try:
        gate = QuotaGate(client, prefix, timeout_s=5.0, max_timeout_s=5.0)
        estimated = await admit(gate, "a", 3000)
        assert estimated.allowed
        await estimated.finish(0, input_tokens=500)  # read 2500 fewer than charged
        # 6000 - 500 left: without the refund only 3000 (and the refill) would be
        assert (await admit(gate, "b", 5000)).allowed
        await gate.drain()
        overran = await admit(gate, "c", 100)
        assert overran.allowed
        await overran.finish(0, input_tokens=2600)  # read 2500 more than charged
        await gate.drain()
        refused = await admit(gate, "d", 100)
        await gate.aclose()
    finally:
        await client.aclose()
    # 500 + 5000 + 2600 = 8100 read: 2100 beyond the bucket, less what refilled meanwhile
    assert (refused.status, refused.limit) == (429, "input_tokens")
    assert 10.0 < refused.retry_after_s <= 22.0


async def test_a_request_without_the_engines_count_keeps_its_estimate(
        valkey: EmbeddedValkey, prefix: str) -> None:
    client = aioredis.Redis.from_url(valkey.url, socket_timeout=5, socket_connect_timeout=5)
    try:
        gate = QuotaGate(client, prefix, timeout_s=5.0, max_timeout_s=5.0)
        first = await admit(gate, "a", 4000)
        await first.finish(0)  # no usage: the 4000 stand
        refused = await admit(gate, "b", 4000)
        await gate.aclose()
    finally:
        await client.aclose()
    assert (refused.status, refused.limit) == (429, "input_tokens")


def test_the_local_limiter_settles_input_tokens_too() -> None:
    limits = LocalLimits(1.0, lease_s=60.0)

    def admitted(request_id: str, tokens: int) -> bool:
        return limits.admit("acme", QUOTA, input_tokens=tokens, request_id=request_id,
                            now=100.0).allowed

    assert admitted("a", 3000)
    limits.charge("acme", QUOTA, "a", 0, release=True, now=100.0, input_tokens=500 - 3000)
    assert admitted("b", 5000)  # the refund made room
    limits.charge("acme", QUOTA, "b", 0, release=True, now=100.0, input_tokens=1000)
    assert not admitted("c", 1)  # 500 + 6000 read: in debt
