"""Tenant quotas at real balancers sharing one Valkey, in front of simulated GPU servers:
two balancers admit a tenant's requests jointly up to its limit and refuse the rest with 429,
``Retry-After`` and the ``x-ratelimit-*`` headers; output tokens streamed through one
balancer are charged and refuse the next request on the other; concurrency slots come back
when streams end; a tenant without limits never touches the quota state."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from policies.model import Identity, Policy, Tenant, TenantQuota
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tenants.quota import QuotaGate
from tenants.throttles import throttles_between
from tests.balancer.helpers import MODEL, completion

# The bound on the balancers' calls to the shared state (their gates' and their clients'):
# these tests are about quotas, not that bound, and a loaded machine can stall a process or
# a round trip for half a second, which a gate takes for Redis down (local limits, or 503).
PATIENT_S = 5.0


@pytest.fixture(autouse=True)
def patient_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The balancers' quota gates wait for Redis as long as ``PATIENT_S``."""
    monkeypatch.setattr("regions.balancer.tenancy.tenant_quota.QuotaGate", functools.partial(
        QuotaGate, timeout_s=PATIENT_S, max_timeout_s=PATIENT_S))


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix, timeout_s=PATIENT_S)


@asynccontextmanager
async def two_balancers(policy: Policy, shared: SharedStateConfig, time_scale: float = 50.0,
                        ) -> AsyncIterator[list[aiohttp.ClientSession]]:
    """One simulated GPU server behind two balancers (each with its own state client)."""
    async with Fleet([ServerSpec("gpu0", models=(MODEL,))], time_scale=time_scale) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 64) for s in fleet]
        balancers = [
            build_balancer(
                f"r{i}",
                backends,
                BalancerConfig(scrape_every_s=0, shared_state=shared, policy=policy),
            )
            for i in range(2)
        ]
        async with balancers[0], balancers[1], \
                aiohttp.ClientSession(base_url=balancers[0].url) as one, \
                aiohttp.ClientSession(base_url=balancers[1].url) as two:
            yield [one, two]


async def keyed(shared: SharedStateConfig, tenant: str) -> dict[str, str]:
    made = new_key(tenant)
    store = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    await store_key(store, made.stored)
    await store.close()
    return {"Authorization": f"Bearer {made.token}"}


def with_tenants(base: Policy, *tenants: Tenant) -> Policy:
    return dataclasses.replace(base, identity=Identity(), tenants=tenants)


async def server_time(store: AsyncStateStore) -> float:
    seconds, micros = await store.client.time()
    return float(seconds + micros / 1e6)


async def test_two_balancers_share_a_tenants_request_limit(example_policy: Policy,
                                                           shared: SharedStateConfig) -> None:
    """40 requests alternating between the balancers, at 30 a minute: the burst of 30 is
    admitted, plus what the bucket refilled (one request per 2 s) over the time they took
    on the state's clock, and the rest refused at both balancers."""
    policy = with_tenants(example_policy,
                          Tenant("acme", quota=TenantQuota(requests_per_minute=30)),
                          Tenant("free"))
    acme = await keyed(shared, "acme")
    free = await keyed(shared, "free")
    store = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    async with two_balancers(policy, shared) as clients:
        statuses, refusals = [], []
        started = await server_time(store)
        for n in range(40):
            async with clients[n % 2].post("/v1/completions",
                                           json=completion(2, stream=False),
                                           headers=acme) as resp:
                statuses.append((n % 2, resp.status))
                if resp.status == 429:
                    refusals.append((dict(resp.headers), await resp.json()))
                else:
                    await resp.read()
                    assert resp.headers["x-ratelimit-limit-requests"] == "30"
        elapsed = await server_time(store) - started
        admitted = sum(status == 200 for _, status in statuses)
        refilled = math.floor(elapsed * 30 / 60 + 1e-6)
        assert 30 <= admitted <= 30 + refilled, (elapsed, statuses)
        assert {side for side, status in statuses if status == 429} == {0, 1}
        headers, body = refusals[0]
        assert body["error"]["code"] == "rate_limit_exceeded"
        assert int(headers["Retry-After"]) >= 1
        assert headers["x-ratelimit-remaining-requests"] == "0"
        for client in clients:  # another tenant is not limited by acme's quota
            async with client.post("/v1/completions", json=completion(2, stream=False),
                                   headers=free) as resp:
                assert resp.status == 200
                assert "x-ratelimit-limit-requests" not in resp.headers
                await resp.read()
    counted = await throttles_between(store, time.time() - 120, time.time() + 60)
    await store.close()  # the balancers flushed their refusal counts as they stopped
    assert sum(row.refused for row in counted if row.key.tenant == "acme") == 40 - admitted


async def test_streamed_output_tokens_are_charged_and_refuse_on_the_other_balancer(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(
        output_tokens_per_minute=100)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared) as clients:
        for client in clients:  # 60 + 60 tokens: the bucket ends 20 in debt
            async with client.post("/v1/completions", json=completion(60),
                                   headers=acme) as resp:
                assert resp.status == 200
                assert (await resp.read()).count(b"data: {") == 60
        async with clients[0].post("/v1/completions", json=completion(5),
                                   headers=acme) as resp:
            assert resp.status == 429
            body = await resp.json()
            assert "output_tokens" in body["error"]["message"]
            assert 1 <= int(resp.headers["Retry-After"]) <= 13  # 20 tokens at 100/min: 12 s


async def test_a_running_stream_is_charged_before_it_ends(example_policy: Policy,
                                                         shared: SharedStateConfig) -> None:
    """A long stream through one balancer runs its tenant over its output quota: the other
    balancer refuses the tenant while the stream still runs (charged about once a second,
    not only at the end)."""
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(
        output_tokens_per_minute=100)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared, time_scale=1.0) as (one, two):
        async with one.post("/v1/completions", json=completion(600),
                            headers=acme) as stream:
            assert stream.status == 200
            reader = asyncio.create_task(stream.read())
            refused_while_streaming = False
            while not reader.done():
                async with two.post("/v1/completions", json=completion(1, stream=False),
                                    headers=acme) as resp:
                    await resp.read()
                    if resp.status == 429:
                        refused_while_streaming = not reader.done()
                        break
                await asyncio.sleep(0.2)
            body = await reader
        assert refused_while_streaming
        assert body.count(b"data: {") == 600


async def test_concurrency_slots_come_back_when_streams_end(example_policy: Policy,
                                                            shared: SharedStateConfig) -> None:
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(concurrent=2)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared) as clients:
        long = [await clients[i].post("/v1/completions", json=completion(400), headers=acme)
                for i in range(2)]
        assert [r.status for r in long] == [200, 200]
        async with clients[0].post("/v1/completions", json=completion(2),
                                   headers=acme) as resp:
            assert resp.status == 429
        for resp in long:
            await resp.read()
            resp.release()
        await asyncio.sleep(0.05)
        async with clients[1].post("/v1/completions", json=completion(2),
                                   headers=acme) as resp:
            assert resp.status == 200
            await resp.read()


async def test_the_quota_wait_of_the_shared_state_bounds_the_gate(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    """``SharedStateConfig.quota_wait_s`` (``region serve --quota-wait``) is the least the
    gate waits for Redis, and the state client's own timeout does not cut it shorter."""
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(concurrent=2)))
    patient = dataclasses.replace(shared, quota_wait_s=1.5)
    for config, bound in ((shared, 0.25), (patient, 1.5)):
        balancer = build_balancer(
            "r0",
            [BackendSpec("gpu0", "http://127.0.0.1:9", (MODEL,), 4)],
            BalancerConfig(scrape_every_s=0, shared_state=config, policy=policy),
        )
        async with balancer:
            gate = balancer.quotas.gate
            assert gate is not None and gate.bound_s == bound
            assert balancer.link is not None
            timeout = balancer.link.store.client.connection_pool.connection_kwargs[
                "socket_timeout"]
            assert timeout >= bound
