"""A quota means what it says: ``requests 10/s`` is a bucket of ten refilled at ten a
second, ``burst N`` makes it N, on the shared path (QuotaGate on a real Valkey, the Lua
scripts) and on the local one (LocalLimits, what a balancer falls back on) alike."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from policies import load_policy_text
from policies.model import RedisDown, TenantQuota
from state import EmbeddedValkey
from tenants.local_limits import LocalLimits
from tenants.quota import QuotaGate

POLICY = """\
zone infer.example.com {{ ns ns1.infer.example.com 127.0.0.1 }}
region us-east {{ location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps
    gpu use1-a {{ url http://127.0.1.11:8000; models llama-3-8b }}
}}
service chat.infer.example.com {{ regions us-east; all-down answer-nothing }}
identity {{ api-keys on }}
tenant acme {{ quota {{ {quota} }} }}
"""


def quota_of(text: str) -> TenantQuota:
    """The quota as an operator writes it, compiled by the policy loader."""
    return load_policy_text(POLICY.format(quota=text), prove=False).tenants[0].quota


async def server_time(client: aioredis.Redis) -> float:
    seconds, micros = await client.time()
    return seconds + micros / 1e6


async def burst_at_once(gate: QuotaGate, quota: TenantQuota, offered: int, tag: str,
                        ) -> int:
    """Offer ``offered`` requests at once; how many were admitted."""
    admissions = await asyncio.gather(*(
        gate.admit("acme", quota, RedisDown.CLOSED, input_tokens=1, max_output_tokens=None,
                   request_id=f"{tag}{n}")
        for n in range(offered)))
    for admission in admissions:
        assert admission.allowed or (admission.status, admission.limit) == (429, "requests")
    return sum(admission.allowed for admission in admissions)


@pytest.mark.parametrize(("text", "size"), [
    pytest.param("requests 10/s", 10, id="10/s-holds-ten"),
    pytest.param("requests 10/s burst 40", 40, id="declared-burst-40"),
    pytest.param("requests 600/min burst 5", 5, id="per-minute-with-a-small-burst"),
])
async def test_a_full_bucket_admits_its_size_at_once_then_refills_at_the_rate(
    valkey: EmbeddedValkey, prefix: str, text: str, size: int,
) -> None:
    """Four times the bucket at once: the bucket's size is admitted (plus what refills while
    the burst is decided, and the one slice the gate may hold), never the minute's worth.
    A second later: a second's refill, at most the bucket again."""
    quota = quota_of(text)
    rate_per_s = quota.requests_per_minute / 60
    client = aioredis.Redis.from_url(valkey.url, socket_timeout=5, socket_connect_timeout=5)
    try:
        gate = QuotaGate(client, prefix, timeout_s=5.0, max_timeout_s=5.0)
        started = await server_time(client)
        first = await burst_at_once(gate, quota, 4 * size, "a")
        ended = await server_time(client)
        assert size <= first <= size + 1 + rate_per_s * (ended - started), (text, first)

        await asyncio.sleep(1.0)
        started = await server_time(client)
        second = await burst_at_once(gate, quota, 4 * size, "b")
        ended = await server_time(client)
        await gate.drain()
    finally:
        await client.aclose()
    refilled = min(size, rate_per_s)  # a second at the rate, at most a full bucket
    assert refilled - 1 <= second <= size + 1 + rate_per_s * (ended - started), (text, second)


@pytest.mark.parametrize(("text", "size", "rate_per_s"), [
    pytest.param("requests 10/s", 10, 10, id="10/s"),
    pytest.param("requests 10/s burst 40", 40, 10, id="10/s-burst-40"),
    pytest.param("requests 600/min", 600, 10, id="600/min-a-minute's-worth"),
    pytest.param("requests 3600/h", 3600, 1, id="3600/h-an-hour's-worth"),
])
def test_local_limits_keep_the_same_bucket(text: str, size: int, rate_per_s: float) -> None:
    """The in-process limiter (what a balancer decides by while Redis is down) at its whole
    share: the bucket's size at once, then exactly its rate."""
    quota = quota_of(text)
    limits = LocalLimits(1.0, lease_s=60.0)

    def offer(count: int, now: float) -> int:
        return sum(limits.admit("acme", quota, input_tokens=1, request_id=f"{now}-{n}",
                                now=now).allowed for n in range(count))

    assert offer(4 * size + 10, now=1000.0) == size
    assert offer(4 * size + 10, now=1001.0) == min(size, rate_per_s)
    assert offer(4 * size + 10, now=1001.0 + 2 * size / rate_per_s) == size


def test_local_limits_scale_the_bucket_with_their_share() -> None:
    """At a third of the limits (three balancers), a third of the bucket and of the rate."""
    quota = quota_of("requests 30/s burst 90")
    limits = LocalLimits(1 / 3, lease_s=60.0)
    admitted = sum(limits.admit("acme", quota, input_tokens=1, request_id=str(n),
                                now=5.0).allowed for n in range(100))
    assert admitted == 30
    later = sum(limits.admit("acme", quota, input_tokens=1, request_id=f"b{n}",
                             now=6.0).allowed for n in range(100))
    assert later == 10
