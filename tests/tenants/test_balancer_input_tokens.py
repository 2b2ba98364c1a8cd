"""A tenant's input-token quota at a real balancer on Valkey, in front of a simulated GPU
server: a client's ``x_prompt_tokens`` never lowers the charge below the prompt's size, and
the engine's ``usage.prompt_tokens`` settles it when the request ends."""

from __future__ import annotations

import pytest

from policies.model import Policy, Tenant, TenantQuota
from regions.balancer import SharedStateConfig
from state import EmbeddedValkey
from tests.balancer.helpers import MODEL
from tests.tenants.test_balancer_quota import keyed, two_balancers, with_tenants


@pytest.fixture
def shared(valkey: EmbeddedValkey, prefix: str) -> SharedStateConfig:
    return SharedStateConfig(valkey.url, prefix=prefix)


def prompt(chars: int, declared: int) -> dict[str, object]:
    """A completion of ``chars`` characters of prompt (``chars / 4`` tokens estimated) that
    declares ``declared`` tokens."""
    return {"model": MODEL, "prompt": "x" * chars, "max_tokens": 2, "stream": False,
            "x_prompt_tokens": declared}


async def test_a_declared_count_never_lowers_the_charge(example_policy: Policy,
                                                       shared: SharedStateConfig) -> None:
    """A 4 MB prompt declaring one token is charged as the million tokens its size says:
    refused by a 10k/min input quota half spent (a request bigger than the bucket needs a
    full one)."""
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(
        input_tokens_per_minute=10_000)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared) as (client, _):
        async with client.post("/v1/completions", json=prompt(4, 5000),
                               headers=acme) as resp:
            assert resp.status == 200
            await resp.read()
        async with client.post("/v1/completions", json=prompt(4 * 1024 * 1024, 1),
                               headers=acme) as resp:
            assert resp.status == 429
            body = await resp.json()
    assert "input_tokens" in body["error"]["message"]


async def test_the_engines_usage_settles_the_input_charge(example_policy: Policy,
                                                          shared: SharedStateConfig) -> None:
    """A 40,000-character prompt is charged 10,000 tokens at admission; the simulated engine
    reports one (it believes the declaration, as it does for benchmarks), and the settlement
    gives the rest back: the same request is admitted again at once, where the 15k/min
    bucket, charged 10,000 twice, would refuse it."""
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(
        input_tokens_per_minute=15_000)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared) as (client, _):
        statuses, usage = [], []
        for _ in range(3):
            async with client.post("/v1/completions", json=prompt(40_000, 1),
                                   headers=acme) as resp:
                statuses.append(resp.status)
                if resp.status == 200:
                    usage.append((await resp.json())["usage"]["prompt_tokens"])
                else:
                    await resp.read()
    assert statuses == [200, 200, 200], statuses
    assert usage == [1, 1, 1]


async def test_a_prompt_the_engine_counts_longer_than_declared_is_charged_in_full(
        example_policy: Policy, shared: SharedStateConfig) -> None:
    """Declared more than the text (the simulator's benchmark mode): 6000 tokens of a
    10k/min bucket are charged, and the next such request is refused."""
    policy = with_tenants(example_policy, Tenant("acme", quota=TenantQuota(
        input_tokens_per_minute=10_000)))
    acme = await keyed(shared, "acme")
    async with two_balancers(policy, shared) as (client, _):
        statuses = []
        for _ in range(2):
            async with client.post("/v1/completions", json=prompt(4, 6000),
                                   headers=acme) as resp:
                statuses.append(resp.status)
                await resp.read()
    assert statuses == [200, 429]
