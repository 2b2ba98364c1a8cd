"""The example policies compile, pass the residency proof, and compile to what they say."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import check_policy, load_policy
from policies.model import AllDownKind, Policy, UnknownKind

EXAMPLES = Path(__file__).resolve().parents[2] / "policies" / "examples"
TOP_LEVEL = sorted(p.name for p in EXAMPLES.glob("*.dp"))


@pytest.fixture(scope="module")
def global_policy() -> Policy:
    return load_policy(str(EXAMPLES / "global.dp"))


@pytest.mark.parametrize("name", TOP_LEVEL, ids=TOP_LEVEL)
def test_example_checks_clean(name: str) -> None:
    result = check_policy(str(EXAMPLES / name))
    assert result.ok, result.error().render()
    assert result.policy is not None


def test_global_example_proves_every_path(global_policy: Policy) -> None:
    result = check_policy(str(EXAMPLES / "global.dp"))
    assert result.proof, "the proof enumerated no path"
    assert all(not check.leaks for check in result.proof)
    rules = {(c.service, c.rule) for c in result.proof}
    assert ("chat.infer.example.com", "eu-gdpr") in rules
    assert ("sovereign.infer.example.com", "india") in rules
    paths = {c.path for c in result.proof}
    assert {"primary", "failover in steering order", "all allowed regions down",
            "unknown client location"} <= paths
    assert any(p.startswith("spillover ") for p in paths)


def test_global_example_has_the_four_regions(global_policy: Policy) -> None:
    assert global_policy.region_names == ("us-east", "eu-west", "eu-central", "ap-south")


def test_capacity_gpus_times_rate(global_policy: Policy) -> None:
    capacity = global_policy.region("us-east").capacity
    assert (capacity.gpus, capacity.per_gpu_rps, capacity.rps) == (4, 6.0, 24.0)
    assert global_policy.region("ap-south").capacity.rps == 12.0
    assert global_policy.region("ap-south").capacity.gpus is None


def test_includes_splice_gpus_into_regions(global_policy: Policy) -> None:
    us_east = global_policy.region("us-east")
    assert [g.name for g in us_east.gpus] == [
        "use1-h100-a", "use1-h100-b", "use1-a100-a", "use1-a100-b"]
    assert us_east.gpus[3].engine == "sglang"
    assert us_east.gpus[0].models == ("llama-3.1-8b-instruct", "bge-large-en",
                                      "llama-3.1-8b-sovereign")
    eu_central = global_policy.region("eu-central")
    assert eu_central.gpus[1].speed == 0.6
    assert eu_central.gpus[0].engine == "vllm"  # the default
    assert [g.kind for g in global_policy.region("ap-south").gpus] == ["A100", "A100"]


def test_allow_jurisdiction_expands_to_regions(global_policy: Policy) -> None:
    rule = global_policy.service("chat.infer.example.com").residency[0]
    assert rule.allowed == ("eu-west", "eu-central")
    assert rule.clients.jurisdictions == frozenset({"EU"})
    assert global_policy.jurisdiction("EU").countries >= {"DE", "FR", "IS", "NO"}


def test_service_settings(global_policy: Policy) -> None:
    chat = global_policy.service("Chat.Infer.Example.com.")
    assert chat.steer == ("latency", "geo")
    assert chat.spillover is not None
    assert (chat.spillover.threshold, chat.spillover.max_share) == (0.85, 0.30)
    assert chat.spillover.targets is None
    assert (chat.failover.fall, chat.failover.interval, chat.failover.timeout) == (2, 1.0, 0.5)
    assert chat.unknown_location.regions == ("eu-west", "eu-central")
    assert chat.residency[0].all_down.kind is AllDownKind.ANSWER_ALLOWED
    embed = global_policy.service("embed.infer.example.com")
    assert embed.priority == ("us-east", "eu-west", "eu-central", "ap-south")
    assert embed.ttl == 60.0 and embed.degraded_ttl == 5.0
    sovereign = global_policy.service("sovereign.infer.example.com")
    assert sovereign.unknown_location.kind is UnknownKind.REFUSE
    assert [r.name for r in sovereign.residency] == ["eu-gdpr", "india"]


def test_zone_and_state(global_policy: Policy) -> None:
    zone = global_policy.zone
    assert zone.apex == "infer.example.com"
    assert zone.soa.refresh == 3600.0 and zone.soa.expire == 14 * 86400.0
    assert zone.soa.serial is None
    assert zone.nameservers[0].addresses == ("127.0.0.1", "::1")
    assert global_policy.stale_after == 30.0
    assert global_policy.healthcheck("balancer").timeout == 0.5


def test_minimal_example_defaults() -> None:
    policy = load_policy(str(EXAMPLES / "minimal.dp"))
    service = policy.service("chat.infer.example.com")
    assert service.regions == ("us-east", "eu-west")  # every region by default
    assert service.ttl == 30.0 and service.degraded_ttl == 5.0
    assert service.answers == 1
    assert (service.failover.fall, service.failover.rise) == (3, 2)
    assert service.unknown_location.kind is UnknownKind.ANY
    assert policy.zone.admin_networks == ("127.0.0.0/8", "::1/128")
    assert policy.zone.soa.mname == "ns1.infer.example.com"
    assert policy.stale_after == 60.0
    assert policy.region("us-east").weight == 100.0
