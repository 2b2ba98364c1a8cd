# SPDX-License-Identifier: Apache-2.0
"""Overflow of a saturated region: real balancers (one per region, port 0) in one process,
each in front of its own simulated GPU server; region A is saturated by a hung stream."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from policies import load_policy_text
from policies.matching import NOWHERE, Place
from regions.balancer import AdmissionConfig, BackendSpec, Balancer, BalancerConfig, build_balancer
from regions.balancer.errors import BalancerConfigError
from regions.balancer.signals.overflow import (
    OVERFLOW_HEADER,
    OVERFLOW_PARAM,
    Overflow,
    OverflowConfig,
    OverflowMode,
    siblings,
)
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, CheckedClient, ResidencyCheck
from regions.simulator import Fault, FaultMode, Fleet, ServerSpec
from tests.balancer.helpers import MODEL, completion
from tests.run_clock import eventually

POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries SE FR DE }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region eu-central { location 50.1 8.7; jurisdiction EU; endpoints 127.0.3.1; capacity 10rps }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
service chat.infer.example.com {
    residency eu { clients jurisdiction EU; allow eu-west eu-central; all-down answer-allowed }
    unknown-location regions eu-west eu-central
    all-down answer-nothing
}
service eu-only.infer.example.com {
    regions eu-west us-east
    all-down answer-nothing
}
"""
CHAT = "chat.infer.example.com"
DE = {"Host": CHAT, "X-Director-Client-Country": "DE"}
US = {"Host": CHAT, "X-Director-Client-Country": "US"}
SATURABLE = BalancerConfig(admission=AdmissionConfig(max_queue=0))


@pytest.fixture(scope="module")
def policy():
    return load_policy_text(POLICY)


def nowhere(address: Any) -> Place:
    return NOWHERE


def placed(policy: Any, headers: Mapping[str, str]) -> CheckedClient:
    """The client as the eu-west balancer's check places it, from a trusted edge."""
    where, described = check(policy, "eu-west").client("127.0.0.1", headers)
    return CheckedClient(where, described, MODEL)


def check(policy: Any, region: str) -> ResidencyCheck:
    return ResidencyCheck(policy, region, nowhere, LOOPBACK_EDGE)


@asynccontextmanager
async def region(
    stack: AsyncExitStack, policy: Any, name: str, overflow: OverflowConfig | None = None
) -> AsyncIterator[tuple[Fleet, Balancer]]:
    fleet = await stack.enter_async_context(Fleet([ServerSpec(f"{name}-gpu")], time_scale=20))
    backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 1) for s in fleet]
    balancer = build_balancer(
        name,
        backends,
        dataclasses.replace(SATURABLE, residency=check(policy, name), overflow=overflow),
    )
    yield fleet, await stack.enter_async_context(balancer)


async def saturate(
    stack: AsyncExitStack, fleet: Fleet, balancer: Balancer
) -> aiohttp.ClientResponse:
    """Hang the region's only GPU and hold its only slot with one stream."""
    for server in fleet:
        server.set_fault(Fault(FaultMode.HANG))
    session = await stack.enter_async_context(aiohttp.ClientSession())
    held = await session.post(
        f"{balancer.url}/v1/completions", json=completion(10), headers={"Host": CHAT}
    )
    await eventually(lambda: balancer.pool.in_flight() == 1)
    return held


async def release(fleet: Fleet, held: aiohttp.ClientResponse) -> None:
    """Let the hung stream finish (it must end complete)."""
    for server in fleet:
        server.set_fault(Fault())
    assert (await held.read()).endswith(b"data: [DONE]\n\n")


def overflow_to(mode: OverflowMode, urls: Mapping[str, str]) -> OverflowConfig:
    return OverflowConfig(mode, balancer_port=None, urls=dict(urls))


async def post(
    url: str, headers: Mapping[str, str], *, redirects: bool = False
) -> tuple[int, Mapping[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, json=completion(6), headers=dict(headers), allow_redirects=redirects
        ) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def test_redirect_sends_a_307_to_the_sibling_which_serves_it(policy) -> None:
    async with AsyncExitStack() as stack:
        _, b = await stack.enter_async_context(region(stack, policy, "eu-central"))
        config = overflow_to(OverflowMode.REDIRECT, {"eu-central": b.url})
        fleet_a, a = await stack.enter_async_context(region(stack, policy, "eu-west", config))
        held = await saturate(stack, fleet_a, a)
        status, headers, _ = await post(f"{a.url}/v1/completions?x=1", DE)
        assert status == 307
        location = headers["Location"]
        assert location == f"{b.url}/v1/completions?x=1&{OVERFLOW_PARAM}=eu-west"
        status, headers, body = await post(location, DE)
        assert status == 200 and headers["x-director-region"] == "eu-central"
        assert body.endswith(b"data: [DONE]\n\n")
        assert a.overflow is not None and a.overflow.counts == {"redirect:eu-central": 1}
        async with aiohttp.ClientSession() as session, \
                session.get(f"{a.admin_url}/metrics") as resp:
            metrics = await resp.text()
        assert ('director_balancer_overflow_total{outcome="redirect",sibling="eu-central"} 1.0'
                in metrics)
        await release(fleet_a, held)


async def test_proxy_streams_the_siblings_answer(policy) -> None:
    async with AsyncExitStack() as stack:
        _, b = await stack.enter_async_context(region(stack, policy, "eu-central"))
        config = overflow_to(OverflowMode.PROXY, {"eu-central": b.url})
        fleet_a, a = await stack.enter_async_context(region(stack, policy, "eu-west", config))
        held = await saturate(stack, fleet_a, a)
        status, headers, body = await post(f"{a.url}/v1/completions", DE)
        assert status == 200
        assert headers["x-director-region"] == "eu-central"
        assert headers["x-director-backend"] == "eu-central-gpu"
        assert headers[OVERFLOW_HEADER] == "eu-west"
        assert body.endswith(b"data: [DONE]\n\n") and body.count(b"data: {") >= 6
        await release(fleet_a, held)
        status, headers, _ = await post(f"{a.url}/v1/completions", DE)  # A has room again
        assert status == 200 and headers["x-director-region"] == "eu-west"


async def test_an_eu_client_is_never_overflowed_outside_the_eu(policy) -> None:
    async with AsyncExitStack() as stack:
        _, us = await stack.enter_async_context(region(stack, policy, "us-east"))
        config = overflow_to(OverflowMode.PROXY, {"us-east": us.url})
        fleet_a, a = await stack.enter_async_context(region(stack, policy, "eu-west", config))
        held = await saturate(stack, fleet_a, a)
        status, headers, _ = await post(f"{a.url}/v1/completions", DE)
        assert status == 429 and "Retry-After" in headers
        redirect = overflow_to(OverflowMode.REDIRECT, {"us-east": us.url})
        assert a.overflow is not None
        a.overflow = Overflow("eu-west", redirect, a.residency)
        status, headers, _ = await post(f"{a.url}/v1/completions", DE)
        assert status == 429 and "Location" not in headers
        a.overflow = Overflow("eu-west", config, a.residency)
        status, headers, _ = await post(f"{a.url}/v1/completions", US)  # a US client may go
        assert status == 200 and headers["x-director-region"] == "us-east"
        assert a.overflow.counts == {"proxy:us-east": 1}
        await release(fleet_a, held)


async def test_one_hop_only_a_marked_request_is_never_overflowed_again(policy) -> None:
    async with AsyncExitStack() as stack:
        fleet_b, b = await stack.enter_async_context(region(stack, policy, "eu-central"))
        config = overflow_to(OverflowMode.PROXY, {"eu-central": b.url})
        fleet_a, a = await stack.enter_async_context(region(stack, policy, "eu-west", config))
        b.overflow = Overflow(
            "eu-central", overflow_to(OverflowMode.PROXY, {"eu-west": a.url}), b.residency
        )
        held_a = await saturate(stack, fleet_a, a)
        held_b = await saturate(stack, fleet_b, b)
        status, headers, _ = await post(f"{a.url}/v1/completions", DE)
        assert status == 429  # B shed it too and did not send it back
        assert headers[OVERFLOW_HEADER] == "eu-west"
        assert b.overflow.counts == {}
        marked = {**DE, OVERFLOW_HEADER: "elsewhere"}
        status, _, _ = await post(f"{b.url}/v1/completions", marked)
        assert status == 429 and b.overflow.counts == {}
        redirected = f"{b.url}/v1/completions?{OVERFLOW_PARAM}=elsewhere"
        status, _, _ = await post(redirected, DE)
        assert status == 429 and b.overflow.counts == {}
        status, headers, _ = await post(f"{b.url}/v1/completions", DE)  # unmarked: overflows
        assert status == 429 and headers[OVERFLOW_HEADER] == "eu-central"
        assert b.overflow.counts == {"proxy:eu-west": 1}
        await release(fleet_a, held_a)
        await release(fleet_b, held_b)


async def test_off_answers_429_as_before(policy) -> None:
    async with AsyncExitStack() as stack:
        fleet_a, a = await stack.enter_async_context(
            region(stack, policy, "eu-west", OverflowConfig())
        )
        held = await saturate(stack, fleet_a, a)
        status, headers, _ = await post(f"{a.url}/v1/completions", DE)
        assert status == 429 and int(headers["Retry-After"]) >= 1
        await release(fleet_a, held)


def test_siblings_are_nearest_first_with_known_urls(policy) -> None:
    config = OverflowConfig(
        OverflowMode.PROXY, balancer_port=8080, urls={"us-east": "http://10.0.0.1:9000/"}
    )
    found = siblings(check(policy, "eu-west"), config)
    assert [(s.region, s.url) for s in found] == [
        ("eu-central", "http://127.0.3.1:8080"),
        ("us-east", "http://10.0.0.1:9000"),
    ]
    only_named = OverflowConfig(OverflowMode.PROXY, urls={"us-east": "http://10.0.0.1:9000"})
    assert [s.region for s in siblings(check(policy, "eu-west"), only_named)] == ["us-east"]


@pytest.mark.parametrize(
    ("host", "headers", "expected"),
    [
        (CHAT, {"X-Director-Client-Country": "DE"}, "eu-central"),
        (CHAT, {"X-Director-Client-Country": "US"}, "eu-central"),
        (CHAT, {}, "eu-central"),
        ("eu-only.infer.example.com", {"X-Director-Client-Country": "US"}, "us-east"),
    ],
    ids=[
        "eu-client-stays-in-eu",
        "us-client-nearest",
        "unknown-client",
        "nearest-does-not-serve-the-service",
    ],
)
def test_target(policy, host, headers, expected) -> None:
    config = OverflowConfig(OverflowMode.REDIRECT, balancer_port=8080)
    overflow = Overflow("eu-west", config, check(policy, "eu-west"))
    target = overflow.target(placed(policy, headers), host)
    assert (target.region if target else None) == expected


def test_overflow_needs_the_policy() -> None:
    with pytest.raises(BalancerConfigError, match="needs the policy's residency check"):
        Overflow("eu-west", OverflowConfig(OverflowMode.REDIRECT), None)



@pytest.mark.parametrize(
    ("host", "regions", "expected"),
    [
        (CHAT, (), "eu-central"),
        (CHAT, ("eu-west", "eu-central"), "eu-central"),
        (CHAT, ("eu-west",), None),
        ("eu-only.infer.example.com", ("eu-west", "us-east"), "us-east"),
        ("eu-only.infer.example.com", ("eu-west", "eu-central"), None),
    ],
    ids=["no-tenant-limit", "tenant-lists-sibling", "tenant-lists-no-sibling",
         "tenant-lists-the-serving-sibling", "tenant-lists-only-a-non-serving-sibling"],
)
def test_target_keeps_a_tenant_in_its_regions(policy, host, regions, expected) -> None:
    config = OverflowConfig(OverflowMode.REDIRECT, balancer_port=8080)
    overflow = Overflow("eu-west", config, check(policy, "eu-west"))
    target = overflow.target(placed(policy, {"X-Director-Client-Country": "US"}), host, regions)
    assert (target.region if target else None) == expected


async def test_a_standby_region_whose_wake_outlasts_the_deadline_spills_in_jurisdiction(
        policy) -> None:
    """eu-west's only server is asleep with a wake (60 s) longer than a request's deadline
    (2 s): an EU client's request goes to eu-central at once, never to us-east, and none
    is refused while eu-central has room; meanwhile eu-west wakes its server, and serves
    again once it is up."""
    async with AsyncExitStack() as stack:
        _, central = await stack.enter_async_context(region(stack, policy, "eu-central"))
        await stack.enter_async_context(region(stack, policy, "us-east"))
        fleet = await stack.enter_async_context(Fleet(
            [ServerSpec("eu-west-gpu", asleep=True, wake_s=20 * 3.0)], time_scale=20))
        backends = [BackendSpec("eu-west-gpu", fleet["eu-west-gpu"].url, (MODEL,), 4,
                                standby=True, wake_s=60.0)]
        config = dataclasses.replace(
            BalancerConfig(admission=AdmissionConfig(queue_timeout_s=2.0)),
            residency=check(policy, "eu-west"),
            overflow=overflow_to(OverflowMode.PROXY, {"eu-central": central.url}))
        west = await stack.enter_async_context(build_balancer("eu-west", backends, config))
        answers = [await post(f"{west.url}/v1/completions", DE) for _ in range(5)]
        assert [status for status, _, _ in answers] == [200] * 5
        assert {h["x-director-region"] for _, h, _ in answers} == {"eu-central"}
        assert west.overflow is not None and west.overflow.counts == {"proxy:eu-central": 5}
        await eventually(lambda: not fleet["eu-west-gpu"].context.sleep.asleep, timeout=10)
        await eventually(lambda: west.standby.serving(MODEL), timeout=10)
        status, headers, _ = await post(f"{west.url}/v1/completions", DE)
        assert status == 200 and headers["x-director-region"] == "eu-west"
