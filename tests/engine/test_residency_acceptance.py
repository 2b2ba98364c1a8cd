"""The issue's acceptance cases: EU clients get EU regions whatever health and load say."""

from __future__ import annotations

import itertools

import pytest

from director.engine import Engine, RegionState, Snapshot
from director.engine.clients import client_from_address, client_from_ecs

EU = {"eu-west", "eu-central"}
REGIONS = ("us-east", "eu-west", "eu-central", "ap-south")


def every_state():
    """All 2^4 health combinations times loads: none hot, all hot, each hot alone."""
    loads = [(), REGIONS, *((r,) for r in REGIONS)]
    for bits in itertools.product((True, False), repeat=len(REGIONS)):
        for hot in loads:
            yield Snapshot(1, {
                r: RegionState(healthy=up, utilization=2.0 if r in hot else 0.3)
                for r, up in zip(REGIONS, bits, strict=True)
            })


@pytest.mark.parametrize("service", ["chat.infer.example.com", "embed.infer.example.com",
                                     "sovereign.infer.example.com"])
@pytest.mark.parametrize(("database", "address"), [
    ("test", "89.160.20.112"),  # SE in the MaxMind test database
    ("geolite2", "2.2.2.2"),  # FR in GeoLite2 City 2018
])
def test_eu_clients_only_ever_get_eu_regions(example_policy, maxmind_test_locator, geolite2,
                                             service, database, address):
    locator = maxmind_test_locator if database == "test" else geolite2
    engine = Engine(example_policy)
    client = client_from_address(locator, address)
    answered_any = False
    for snapshot in every_state():
        decision = engine.decide(service, client, snapshot)
        assert set(decision.regions) <= EU, decision.as_dict()
        answered_any |= bool(decision.regions)
    assert answered_any


@pytest.mark.parametrize(("database", "address"), [
    ("test", "216.160.83.56"),  # US (Milton, WA) in the MaxMind test database
    ("geolite2", "8.8.8.8"),  # US in GeoLite2 City 2018
])
def test_us_clients_get_us_east_when_all_is_well(example_policy, maxmind_test_locator, geolite2,
                                                 database, address):
    locator = maxmind_test_locator if database == "test" else geolite2
    decision = Engine(example_policy).decide("chat.infer.example.com",
                                             client_from_address(locator, address), Snapshot())
    assert decision.regions == ("us-east",)
    assert decision.reason == "primary"
    assert decision.rules == ()


def test_eu_all_down_answers_allowed_regions_not_us(example_policy, geolite2):
    snapshot = Snapshot(1, {"eu-west": RegionState(healthy=False),
                            "eu-central": RegionState(healthy=False)})
    decision = Engine(example_policy).decide("chat.infer.example.com",
                                             client_from_address(geolite2, "2.2.2.2"), snapshot)
    assert decision.reason == "all-down"
    assert set(decision.regions) == EU
    assert decision.ttl == example_policy.service("chat.infer.example.com").degraded_ttl == 2.0


def test_unknown_location_gets_the_policy_unknown_regions(example_policy, geolite2):
    decision = Engine(example_policy).decide("chat.infer.example.com",
                                             client_from_address(geolite2, "10.0.0.1"),
                                             Snapshot())
    assert set(decision.regions) <= EU
    assert decision.reason == "unknown-location"


def test_sovereign_service_fails_closed_for_unknown_clients(example_policy, geolite2):
    decision = Engine(example_policy).decide("sovereign.infer.example.com",
                                             client_from_address(geolite2, "10.0.0.1"),
                                             Snapshot())
    assert decision.regions == ()
    assert decision.reason == "refused"


def test_ecs_opt_out_is_an_unlocated_client(example_policy, geolite2):
    decision = Engine(example_policy).decide("chat.infer.example.com",
                                             client_from_ecs(geolite2, "0.0.0.0/0"), Snapshot())
    assert set(decision.regions) <= EU
