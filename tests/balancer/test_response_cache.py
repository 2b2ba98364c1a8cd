# SPDX-License-Identifier: Apache-2.0
"""The exact-match response cache: deterministic requests only, never across tenants,
shared by a region's balancers through a real Valkey, bounded, replayed as a stream."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import openai
import pytest

from policies import load_policy_text
from policies.model import ResponseCache
from regions.balancer import BackendSpec, BalancerConfig, SharedStateConfig, build_balancer
from regions.balancer.degrade.cache_key import cache_key, deterministic
from regions.balancer.degrade.response_store import MemoryStore, RedisStore
from regions.simulator import Fleet, ServerSpec
from state import AsyncStateStore, EmbeddedValkey
from tenants.api_keys import new_key, store_key
from tests.run_clock import eventually

from .helpers import MODEL, stack

CACHED = BalancerConfig(cache=ResponseCache(ttl=60))
POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
service chat.infer.example.com { all-down answer-nothing; cache 1m max 1MB }
identity { api-keys on }
tenant acme {}
tenant globex {}
"""
CHAT = "chat.infer.example.com"


async def stored(balancer: Any, count: int = 1) -> None:
    """Wait until ``count`` answers are stored (a store follows the answer's end)."""
    await eventually(lambda: balancer.metrics.cache.labels("stored")._value.get() >= count)


def served(fleet: Fleet) -> int:
    return sum(s.engine.state().counters.prompt_tokens for s in fleet)


async def ask(client: aiohttp.ClientSession, headers: dict[str, str] | None = None,
              **body: Any) -> tuple[dict[str, str], bytes]:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}],
               "max_tokens": 12, **body}
    async with client.post("/v1/chat/completions", json=payload, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return dict(resp.headers), await resp.read()


def text_of(stream: bytes) -> str:
    parts = []
    for event in stream.split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:])["choices"]:
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


async def test_a_deterministic_stream_is_replayed_without_a_gpu() -> None:
    async with stack((1.0,), config=CACHED) as (fleet, balancer, client):
        first_headers, first = await ask(client, temperature=0, stream=True)
        await stored(balancer)
        before = served(fleet)
        headers, again = await ask(client, temperature=0, stream=True)
        assert headers.get("x-director-cache") == "hit"
        assert "x-director-cache" not in first_headers
        assert served(fleet) == before  # nothing went to the GPU
        assert text_of(again) == text_of(first) and text_of(first)
        ids = {json.loads(e[6:])["id"] for e in again.split(b"\n\n") if e.startswith(b"data: {")}
        assert len(ids) == 1 and ids != {json.loads(first[6:first.index(b"\n")])["id"]}
        sdk = openai.AsyncOpenAI(base_url=f"{balancer.url}/v1", api_key="x", max_retries=0)
        chunks = [c async for c in await sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "2+2?"}], max_tokens=12,
            temperature=0, stream=True)]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
            text_of(first)
        assert served(fleet) == before
        await eventually(lambda: balancer.metrics.cache.labels("hit")._value.get() == 2)


@pytest.mark.parametrize("body", [
    {},  # temperature defaults to 1
    {"temperature": 0.7},
    {"temperature": 0, "n": 2},
    {"temperature": True},
    {"seed": "7"},
])
async def test_a_request_that_may_vary_is_never_answered_from_the_cache(
        body: dict[str, Any]) -> None:
    async with stack((1.0,), config=CACHED) as (_, balancer, client):
        for _ in range(2):
            async with client.post("/v1/chat/completions", json={
                    "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 4, **body}) as resp:
                await resp.read()
                assert resp.headers.get("x-director-cache") is None
        assert balancer.metrics.cache.labels("hit")._value.get() == 0


async def test_a_seeded_request_is_cached_and_a_different_seed_is_not_the_same() -> None:
    async with stack((1.0,), config=CACHED) as (_, balancer, client):
        await ask(client, seed=7)
        await stored(balancer)
        headers, _ = await ask(client, seed=7)
        assert headers.get("x-director-cache") == "hit"
        headers, _ = await ask(client, seed=8)
        assert headers.get("x-director-cache") is None
        headers, _ = await ask(client, seed=7, max_tokens=13)
        assert headers.get("x-director-cache") is None


def test_keys_differ_by_tenant_revision_and_body_but_not_user() -> None:
    raw = json.dumps({"model": "m", "temperature": 0, "prompt": "x"}).encode()
    base = {"tenant": "acme", "service": "s", "model": "m", "revision": "r1",
            "endpoint": "/v1/completions"}
    key = cache_key(raw, **base)
    assert key is not None
    for field, other in (("tenant", "globex"), ("tenant", None), ("revision", "r2"),
                         ("service", "t"), ("endpoint", "/v1/chat/completions")):
        assert cache_key(raw, **{**base, field: other}) != key
    with_user = json.dumps({"user": "u1", "prompt": "x", "temperature": 0, "model": "m"})
    assert cache_key(with_user.encode(), **base) == key
    assert not deterministic({"temperature": 0.0001})


async def test_tenants_never_share_an_entry_and_balancers_of_a_region_do(
        valkey: EmbeddedValkey, prefix: str) -> None:
    policy = load_policy_text(POLICY)
    made = {t: new_key(t) for t in ("acme", "globex")}
    admin = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    for key in made.values():
        await store_key(admin, key.stored)
    await admin.close()
    shared = SharedStateConfig(valkey.url, prefix=prefix)
    async with AsyncExitStack() as exits:
        fleet = await exits.enter_async_context(Fleet([ServerSpec("gpu0", models=(MODEL,))],
                                                      time_scale=20))
        backends = [BackendSpec("gpu0", fleet["gpu0"].url, (MODEL,), 8)]
        config = BalancerConfig(shared_state=shared, policy=policy)
        one, two = [await exits.enter_async_context(build_balancer("eu-west", backends, config))
                    for _ in range(2)]
        for b in (one, two):
            await eventually(lambda b=b: b.tenancy.keys is not None and all(
                k.stored.key_id in b.tenancy.keys.keys for k in made.values()))

        async def as_tenant(balancer: Any, tenant: str) -> dict[str, str]:
            headers = {"Host": CHAT, "Authorization": f"Bearer {made[tenant].token}"}
            async with aiohttp.ClientSession(base_url=balancer.url) as client:
                got, _ = await ask(client, headers, temperature=0, stream=True)
                return got

        assert "x-director-cache" not in await as_tenant(one, "acme")
        await stored(one)
        assert (await as_tenant(two, "acme")).get("x-director-cache") == "hit"
        assert "x-director-cache" not in await as_tenant(one, "globex")
        await stored(one, 2)
        assert (await as_tenant(one, "globex")).get("x-director-cache") == "hit"


async def test_the_stores_stay_within_their_bound(valkey: EmbeddedValkey, prefix: str) -> None:
    memory = MemoryStore()
    shared = AsyncStateStore.from_url(valkey.url, prefix=prefix)
    redis_store = RedisStore(shared.client, prefix, "r")
    try:
        for store in (memory, redis_store):
            for i in range(10):
                assert await store.put(f"k{i}", b"x" * 300, 60, 1000)
            kept = [i for i in range(10) if await store.get(f"k{i}") is not None]
            assert kept == [7, 8, 9]  # the oldest went first
            assert not await store.put("big", b"x" * 1001, 60, 1000)
            await store.put("short", b"y", 0.05, 1000)
            await asyncio.sleep(0.1)
            assert await store.get("short") is None
        total = await shared.client.get(f"{prefix}:cache:{{r}}:total")
        assert int(total) <= 1000
    finally:
        await shared.close()


async def test_a_dead_store_only_costs_the_cache() -> None:
    class Dead(MemoryStore):
        async def get(self, key: str) -> bytes | None:
            return None

        async def put(self, key: str, value: bytes, ttl_s: float, max_bytes: int) -> bool:
            return False

    async with stack((1.0,), config=CACHED) as (_, balancer, client):
        balancer.cache.store = Dead()
        for _ in range(2):
            headers, body = await ask(client, temperature=0)
            assert "x-director-cache" not in headers and json.loads(body)["choices"]
        await eventually(lambda: balancer.metrics.cache.labels("not_stored")._value.get() == 2)


def test_cache_config_is_a_policy_directive() -> None:
    policy = load_policy_text(POLICY)
    (service,) = policy.services
    assert service.cache == ResponseCache(60.0, 1024 * 1024, ())
    assert dataclasses.replace(service.cache, tenants=("acme",)).tenants == ("acme",)
