"""Residency re-check at HTTP level: a client the region may not serve is refused, never
proxied; the GeoIP side uses the MaxMind test database."""

from __future__ import annotations

import dataclasses

import aiohttp
import pytest

from director.geo import GeoLocator
from policies import load_policy_text
from regions.balancer import BackendSpec, BalancerConfig, build_balancer
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.balancer.tenancy.residency_check import LOOPBACK_EDGE, ResidencyCheck
from regions.simulator import Fleet, ServerSpec

POLICY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries SE FR DE }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
service chat.infer.example.com {
    residency eu { clients jurisdiction EU; allow eu-west; all-down answer-allowed }
    unknown-location regions eu-west
    all-down answer-nothing
}
service open.infer.example.com { all-down answer-nothing }
"""
# the same regions, but each service with its own model
BY_MODEL = POLICY.replace("service chat.infer.example.com {",
                          "service chat.infer.example.com {\n    models chat-model") \
    .replace("service open.infer.example.com {",
             "service open.infer.example.com { models open-model;")
SE = "89.160.20.112"  # Sweden in the MaxMind test database
US = "216.160.83.56"  # United States in the MaxMind test database
NOWHERE = "10.1.2.3"  # not in the database


@pytest.fixture(scope="module")
def policy():
    return load_policy_text(POLICY)


@pytest.fixture(scope="module")
def locate(maxmind_test_locator: GeoLocator):
    def locate(address):
        return maxmind_test_locator.locate(address).place

    return locate


@pytest.mark.parametrize(("region", "peer", "host", "headers", "allowed"), [
    ("us-east", "127.0.0.1", "chat.infer.example.com", {"X-Director-Client-IP": SE}, False),
    ("eu-west", "127.0.0.1", "chat.infer.example.com", {"X-Director-Client-IP": SE}, True),
    ("us-east", "127.0.0.1", "chat.infer.example.com", {"X-Director-Client-IP": US}, True),
    ("us-east", "127.0.0.1", "chat.infer.example.com", {"X-Director-Client-Country": "FR"},
     False),
    ("us-east", SE, "chat.infer.example.com", {}, False),
    ("us-east", US, "chat.infer.example.com", {"X-Director-Client-IP": SE}, True),
    ("us-east", NOWHERE, "chat.infer.example.com", {}, False),
    ("us-east", SE, "open.infer.example.com:8080", {}, False),
    ("us-east", SE, "unknown.example.org", {}, False),
    ("us-east", US, "unknown.example.org", {}, True),
], ids=["eu-client-header-us-region", "eu-client-header-eu-region", "us-client-header",
        "country-header", "eu-peer", "untrusted-peer-header-ignored", "unlocated-peer",
        "laxer-service-same-gpus", "unknown-host-eu", "unknown-host-us"])
def test_verdicts(policy, locate, region, peer, host, headers, allowed):
    check = ResidencyCheck(policy, region, locate, LOOPBACK_EDGE)
    verdict = check.check(peer, host, headers)
    assert verdict.allowed is allowed, verdict


@pytest.mark.parametrize(("model", "host", "allowed"), [
    ("chat-model", "open.infer.example.com", False),  # the Host does not choose the rules
    ("open-model", "chat.infer.example.com", True),
    ("open-model", "open.infer.example.com", True),
    ("other-model", "open.infer.example.com", False),  # no service serves it here
    (None, "open.infer.example.com", False),  # unknown model: every service's rules
], ids=["strict-model-lax-host", "lax-model-strict-host", "lax-model", "no-service",
        "no-model"])
def test_residency_follows_the_model_not_the_host(locate, model, host, allowed) -> None:
    policy = load_policy_text(BY_MODEL)
    assert policy.service("open.infer.example.com").models == ("open-model",)
    verdict = ResidencyCheck(policy, "us-east", locate).check(SE, host, {}, model)
    assert verdict.allowed is allowed, verdict
    if model == "other-model":
        assert "serves no service for this model" in verdict.message("us-east")


def test_a_region_in_no_service_refuses(policy, locate) -> None:
    lonely = dataclasses.replace(policy, services=tuple(
        dataclasses.replace(s, regions=("eu-west",)) for s in policy.services))
    verdict = ResidencyCheck(lonely, "us-east", locate).check(US, "chat.infer.example.com", {})
    assert not verdict.allowed and verdict.service == ""


def test_a_refusal_of_a_request_addressed_by_ip_says_to_use_the_name(policy, locate) -> None:
    check = ResidencyCheck(policy, "us-east", locate)
    by_ip = check.check(SE, "127.0.1.1:8080", {}).message("us-east")
    assert "addressed to the balancer by IP" in by_ip
    assert "chat.infer.example.com" in by_ip
    by_name = check.check(SE, "chat.infer.example.com", {}).message("us-east")
    assert "by IP" not in by_name


@pytest.mark.parametrize("headers", [
    {"X-Director-Client-IP": US},
    {"X-Director-Client-Country": "US"},
    {"X-Director-Client-IP": US, "X-Director-Client-Country": "US"},
], ids=["ip", "country", "both"])
def test_no_edge_is_trusted_by_default(policy, locate, headers):
    """Without --trusted-network, not even loopback may say who the client is: a header
    naming a US client is ignored, and the peer itself (placed nowhere) is what is checked."""
    check = ResidencyCheck(policy, "us-east", locate)
    verdict = check.check("127.0.0.1", "chat.infer.example.com", headers)
    assert not verdict.allowed
    assert verdict.client.startswith("127.0.0.1") and "header" not in verdict.client


async def test_a_header_from_an_untrusted_peer_is_ignored_over_http(policy, locate):
    """A real balancer with the default trust: a client on loopback claiming to be in the
    US is located by its own address, so the US region refuses it (unknown location)."""
    check = ResidencyCheck(policy, "us-east", locate)
    async with Fleet([ServerSpec("gpu0")], time_scale=20) as fleet:
        spec = BackendSpec("gpu0", fleet["gpu0"].url, ("sim-model",))
        balancer = build_balancer("us-east", [spec], BalancerConfig(residency=check))
        async with balancer, aiohttp.ClientSession() as session:
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 4}
            headers = {"Host": "chat.infer.example.com", "X-Director-Client-IP": US,
                       "X-Director-Client-Country": "US"}
            async with session.post(f"{balancer.url}/v1/completions", json=body,
                                    headers=headers) as response:
                assert response.status == 451
                message = (await response.json())["error"]["message"]
            assert "client 127.0.0.1 (" in message and "header" not in message
            assert fleet["gpu0"].engine.state().running == 0


async def test_refused_request_never_reaches_a_gpu(policy, locate):
    check = ResidencyCheck(policy, "us-east", locate, LOOPBACK_EDGE)
    async with Fleet([ServerSpec("gpu0")], time_scale=20) as fleet:
        spec = BackendSpec("gpu0", fleet["gpu0"].url, ("sim-model",))
        balancer = build_balancer("us-east", [spec], BalancerConfig(residency=check))
        async with balancer, aiohttp.ClientSession() as session:
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 4}
            url = f"{balancer.url}/v1/completions"
            headers = {"Host": "chat.infer.example.com", "X-Director-Client-IP": SE}
            async with session.post(url, json=body, headers=headers) as response:
                assert response.status == 451
                assert response.headers["x-director-allowed-regions"] == "eu-west"
                error = (await response.json())["error"]
                assert error["type"] == "residency_refused"
                assert "residency eu of chat.infer.example.com" in error["message"]
            headers["X-Director-Client-IP"] = US
            async with session.post(url, json=body, headers=headers) as response:
                assert response.status == 200
            async with session.get(f"{fleet['gpu0'].url}/metrics") as response:
                text = await response.text()
            metrics = await (await session.get(f"{balancer.admin_url}/metrics")).text()
    served = [line for line in text.splitlines()
              if line.startswith("vllm:e2e_request_latency_seconds_count")]
    assert served and float(served[0].split()[-1]) == 1.0  # only the US request got through
    assert 'director_balancer_residency_refused_total{service="chat.infer.example.com"} 1.0' \
        in metrics


async def test_a_canary_serves_only_clients_its_region_may_serve(policy, locate):
    """A region with a revision split (as a rollout's step sets it, here all of it on the
    canary): the residency re-check still refuses a client the region may not serve, before
    any revision is chosen; the clients it may serve get the canary."""
    check = ResidencyCheck(policy, "us-east", locate, LOOPBACK_EDGE)
    specs = [ServerSpec("stable"), ServerSpec("canary")]
    async with Fleet(specs, time_scale=20) as fleet:
        backends = [BackendSpec(name, fleet[name].url, ("sim-model",),
                                revisions=(("sim-model", name),)) for name in ("stable", "canary")]
        balancer = build_balancer("us-east", backends, BalancerConfig(residency=check))
        balancer.revisions.set_overrides(
            {"sim-model": RevisionSplit("sim-model", (("stable", 0.0), ("canary", 100.0)))})
        async with balancer, aiohttp.ClientSession() as session:
            body = {"model": "sim-model", "prompt": "hi", "max_tokens": 4}
            url = f"{balancer.url}/v1/completions"
            headers = {"Host": "chat.infer.example.com", "X-Director-Client-IP": SE}
            async with session.post(url, json=body, headers=headers) as response:
                assert response.status == 451
            headers["X-Director-Client-IP"] = US
            async with session.post(url, json=body, headers=headers) as response:
                assert response.status == 200
                assert response.headers["x-director-revision"] == "canary"
        finished = {name: fleet[name].engine.state().counters.finished
                    for name in ("stable", "canary")}
    assert finished == {"stable": 0, "canary": 1}
