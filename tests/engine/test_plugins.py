"""Table tests of the engine's plugins on small hand-made policies."""

from __future__ import annotations

import ipaddress
from collections import Counter

import pytest

from director.engine import Engine, RegionState, Snapshot
from director.engine.scorers.geo_distance import great_circle_km
from director.engine.types import Client, ClientSource
from director.geo import Location
from policies import load_policy_text

POLICY = """
zone example.net { ns ns1.example.net 192.0.2.53 }
region a { location 40.0 -75.0; jurisdiction US; endpoints 192.0.2.1; capacity 100rps; weight 75 }
region b { location 50.0 8.0; jurisdiction EU; endpoints 192.0.2.2; capacity 100rps; weight 25 }
region c { location 35.0 139.0; jurisdiction JP; endpoints 192.0.2.3; capacity 100rps; weight 0 }
service svc.example.net {
    steer %s
    priority c b a
    all-down %s
}
"""


def client(lat: float | None, lon: float | None, address: str = "198.51.100.7") -> Client:
    ip = ipaddress.ip_address(address)
    network = ipaddress.ip_network((ip, 24), strict=False)
    location = Location("US", "NA", lat, lon, network)
    return Client(ip, network, ClientSource.ECS, location)


def engine(steer: str = "geo", all_down: str = "answer-nothing") -> Engine:
    return Engine(load_policy_text(POLICY % (steer, all_down)))


@pytest.mark.parametrize(("lat", "lon", "expected"), [
    (41.0, -74.0, "a"), (48.8, 2.3, "b"), (35.6, 139.7, "c"),
], ids=["near-a", "near-b", "near-c"])
def test_geo_picks_nearest(lat, lon, expected):
    assert engine("geo").decide("svc.example.net", client(lat, lon), Snapshot()).regions == (
        expected,)


def test_priority_order_and_failover():
    e = engine("priority")
    assert e.decide("svc.example.net", client(41, -74), Snapshot()).regions == ("c",)
    down = Snapshot(1, {"c": RegionState(healthy=False)})
    decision = e.decide("svc.example.net", client(41, -74), down)
    assert decision.regions == ("b",)
    assert decision.reason == "failover"


def test_latency_falls_back_to_geo_without_measurements():
    e = engine("latency geo")
    measured = Snapshot(1, latency={"198.51.100.0/24": {"a": 80.0, "b": 20.0, "c": 200.0}})
    assert e.decide("svc.example.net", client(41, -74), measured).regions == ("b",)
    assert e.decide("svc.example.net", client(41, -74), Snapshot()).regions == ("a",)


def test_weighted_splits_by_weight_and_is_sticky():
    e = engine("weighted")
    counts = Counter(
        e.decide("svc.example.net", client(0, 0, f"10.{i // 256}.{i % 256}.1"),
                 Snapshot()).regions[0]
        for i in range(4000)
    )
    assert counts["c"] == 0  # weight 0 never wins
    assert abs(counts["a"] / 4000 - 0.75) < 0.03
    again = e.decide("svc.example.net", client(0, 0, "10.0.7.1"), Snapshot())
    assert again == e.decide("svc.example.net", client(0, 0, "10.0.7.1"), Snapshot())


@pytest.mark.parametrize(("all_down", "expected"), [
    ("answer-nothing", ()),
    ("answer-allowed", ("a", "b", "c")),
    ("fallback b", ("b",)),
], ids=["nothing", "allowed", "fallback"])
def test_all_down_behaviours_for_unrestricted_clients(all_down, expected):
    e = engine("geo", all_down)
    down = Snapshot(1, {r: RegionState(healthy=False) for r in "abc"})
    decision = e.decide("svc.example.net", client(41, -74), down)
    assert set(decision.regions) == set(expected)
    assert decision.reason == "all-down"


def test_draining_region_is_skipped_and_explained():
    decision = engine("geo").decide("svc.example.net", client(41, -74),
                                    Snapshot(1, {"a": RegionState(draining=True)}))
    assert decision.regions == ("b",)
    health = next(step for step in decision.steps if step.plugin == "health")
    assert health.dropped == {"a": "draining"}


def test_never_probed_region_is_not_failed():
    decision = engine("geo").decide("svc.example.net", client(41, -74),
                                    Snapshot(1, {"a": RegionState(healthy=None)}))
    assert decision.regions == ("a",)


def test_scope_is_zero_when_answer_does_not_depend_on_location():
    decision = engine("priority").decide("svc.example.net", client(41, -74), Snapshot())
    assert not decision.location_dependent
    assert decision.scope_prefix == 0


def test_great_circle_distance_dublin_frankfurt():
    assert great_circle_km(53.35, -6.26, 50.11, 8.68) == pytest.approx(1090, rel=0.02)


def test_geo_steering_without_coordinates_still_depends_on_location():
    ip = ipaddress.ip_address("198.51.100.7")
    network = ipaddress.ip_network("198.51.100.0/22")
    no_coordinates = Client(ip, ipaddress.ip_network((ip, 24), strict=False), ClientSource.ECS,
                            Location("US", "NA", None, None, network))
    decision = engine("geo").decide("svc.example.net", no_coordinates, Snapshot())
    assert decision.location_dependent
    assert decision.scope_prefix == 22
