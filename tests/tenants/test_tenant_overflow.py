"""Overflow with tenants, at real balancers (eu-west overflowing to eu-central) with API keys
in a real Valkey and recording stand-ins for GPU servers: a tenant whose ``regions`` leave out
the only sibling is answered the shed 429 (no redirect, nothing proxied); a tenant whose
regions include the sibling, or that lists none, is redirected there, or proxied there with
its credential (the sibling identifies it again)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from app_server import recording_gpu, serving

from policies import load_policy_text
from policies.matching import NOWHERE, Place
from policies.model import Policy
from regions.balancer import (
    AdmissionConfig,
    BackendSpec,
    Balancer,
    BalancerConfig,
    SharedStateConfig,
    build_balancer,
)
from regions.balancer.signals.overflow import OVERFLOW_PARAM, Overflow, OverflowConfig, OverflowMode
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, ResidencyCheck
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import NewKey, new_key, store_key
from tests.balancer.helpers import MODEL, completion
from tests.run_clock import eventually

POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region eu-central { location 50.1 8.7; jurisdiction EU; endpoints 127.0.3.1; capacity 10rps }
service chat.infer.example.com { regions eu-west eu-central; all-down answer-nothing }
identity { api-keys on }
tenant resident { regions eu-west }
tenant roaming { regions eu-west eu-central }
tenant anywhere {}
"""
CHAT = "chat.infer.example.com"
SATURABLE = BalancerConfig(admission=AdmissionConfig(max_queue=0), scrape_every_s=0)


def nowhere(address: Any) -> Place:
    return NOWHERE


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix)


class Gpu:
    """A recording stand-in for a region's only GPU server, which can be made to hold."""

    def __init__(self) -> None:
        self.seen = 0
        self.go = asyncio.Event()
        self.go.set()

    async def record(self, request: web.Request) -> None:
        self.seen += 1
        await self.go.wait()


@asynccontextmanager
async def region(stack: AsyncExitStack, policy: Policy, name: str, shared: SharedStateConfig,
                 overflow: OverflowConfig | None = None) -> AsyncIterator[tuple[Gpu, Balancer]]:
    gpu = Gpu()
    url = await stack.enter_async_context(serving(recording_gpu(gpu.record)))
    balancer = build_balancer(
        name,
        [BackendSpec(f"{name}-gpu", url, (MODEL,), 1)],
        dataclasses.replace(
            SATURABLE,
            residency=ResidencyCheck(policy, name, nowhere, LOOPBACK_EDGE),
            overflow=overflow,
            shared_state=shared,
            policy=policy,
        ),
    )
    yield gpu, await stack.enter_async_context(balancer)


async def keys(shared: SharedStateConfig, policy: Policy) -> dict[str, NewKey]:
    made = {t.name: new_key(t.name) for t in policy.tenants}
    admin = AsyncStateStore.from_url(shared.url, prefix=shared.prefix)
    for key in made.values():
        await store_key(admin, key.stored)
    await admin.close()
    return made


async def post(url: str, key: NewKey) -> tuple[int, dict[str, str]]:
    """POST a completion as ``key``'s tenant to ``url`` (a base URL, or a full one)."""
    target = url if "/v1/" in url else f"{url}/v1/completions"
    async with aiohttp.ClientSession() as session, session.post(
            target, json=completion(3, stream=False), allow_redirects=False,
            headers={"Host": CHAT, "Authorization": f"Bearer {key.token}"}) as resp:
        await resp.read()
        return resp.status, dict(resp.headers)


async def test_a_tenant_is_never_overflowed_outside_its_regions(shared: SharedStateConfig
                                                                ) -> None:
    policy = load_policy_text(POLICY)
    made = await keys(shared, policy)
    async with AsyncExitStack() as stack:
        gpu_b, b = await stack.enter_async_context(region(stack, policy, "eu-central", shared))
        redirect = OverflowConfig(OverflowMode.REDIRECT, urls={"eu-central": b.url})
        gpu_a, a = await stack.enter_async_context(
            region(stack, policy, "eu-west", shared, redirect))
        await eventually(lambda: a.tenancy.keys is not None and all(
            k.stored.key_id in a.tenancy.keys.keys for k in made.values()))
        gpu_a.go.clear()  # eu-west's only GPU holds the first request: the region is full
        held = asyncio.create_task(post(a.url, made["anywhere"]))
        try:
            await eventually(lambda: gpu_a.seen == 1)
            status, headers = await post(a.url, made["resident"])
            assert status == 429 and "Retry-After" in headers and "Location" not in headers
            assert a.overflow is not None and a.overflow.counts == {"none-allowed": 1}

            proxy = OverflowConfig(OverflowMode.PROXY, urls={"eu-central": b.url})
            a.overflow = Overflow("eu-west", proxy, a.residency)
            status, headers = await post(a.url, made["resident"])
            assert status == 429 and "Retry-After" in headers
            assert a.overflow.counts == {"none-allowed": 1}
            assert gpu_b.seen == 0 and gpu_a.seen == 1  # nothing proxied, nothing queued

            a.overflow = Overflow("eu-west", redirect, a.residency)
            for name in ("roaming", "anywhere"):  # the sibling is otherwise allowed
                status, headers = await post(a.url, made[name])
                assert status == 307
                location = headers["Location"]
                assert location == f"{b.url}/v1/completions?{OVERFLOW_PARAM}=eu-west"
                status, headers = await post(location, made[name])
                assert status == 200 and headers["x-director-region"] == "eu-central"
            assert a.overflow.counts == {"redirect:eu-central": 2}
            assert gpu_b.seen == 2

            a.overflow = Overflow("eu-west", proxy, a.residency)
            for name in ("roaming", "anywhere"):  # the sibling identifies the tenant again
                status, headers = await post(a.url, made[name])
                assert status == 200 and headers["x-director-region"] == "eu-central"
            assert a.overflow.counts == {"proxy:eu-central": 2}
            assert gpu_b.seen == 4
        finally:
            gpu_a.go.set()
        assert (await held)[0] == 200
