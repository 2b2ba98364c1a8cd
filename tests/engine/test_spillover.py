"""Spillover: the share of subnets moved follows the formula, and a subnet keeps its answer."""

from __future__ import annotations

import pytest

from director.engine import Engine, RegionState, Snapshot
from director.engine.clients import client_from_ecs
from director.engine.spillover import spill_share


@pytest.mark.parametrize(("utilization", "threshold", "max_share", "expected"), [
    (0.50, 0.85, 0.30, 0.0),
    (0.85, 0.85, 0.30, 0.0),
    (1.02, 0.85, 0.30, 1 - 0.85 / 1.02),
    (1.20, 1.00, 0.30, 1 - 1 / 1.2),
    (3.00, 0.85, 0.30, 0.30),
], ids=["under", "at", "just-over", "120pct-of-quota", "capped"])
def test_spill_share_formula(utilization, threshold, max_share, expected):
    assert spill_share(utilization, threshold, max_share) == pytest.approx(expected)


def test_share_of_subnets_moved_and_stable(example_policy, geolite2):
    engine = Engine(example_policy)
    spill = example_policy.service("chat.infer.example.com").spillover
    utilization = spill.threshold * 1.2  # 120% of quota
    hot = Snapshot(1, {"us-east": RegionState(utilization=utilization)})
    # US client subnets from GeoLite2's 8.0.0.0/8 block (Level 3, US).
    subnets = [f"8.{b}.{c}.0/24" for b in range(0, 256, 2) for c in range(0, 256, 4)]
    primaries = moved = 0
    first_answers = {}
    for subnet in subnets:
        client = client_from_ecs(geolite2, subnet)
        calm = engine.decide("chat.infer.example.com", client, Snapshot())
        if calm.regions != ("us-east",):
            continue
        primaries += 1
        decision = engine.decide("chat.infer.example.com", client, hot)
        moved += decision.reason == "spillover"
        first_answers[subnet] = decision.regions
    assert primaries > 4000
    expected = spill_share(utilization, spill.threshold, spill.max_share)
    print(f"moved {moved}/{primaries} = {moved / primaries:.4f}, expected {expected:.4f}")
    assert abs(moved / primaries - expected) <= 0.02
    for subnet, answer in list(first_answers.items())[:300]:
        again = engine.decide("chat.infer.example.com", client_from_ecs(geolite2, subnet), hot)
        assert again.regions == answer


def test_eu_clients_never_spill_out_of_the_eu(example_policy, geolite2):
    engine = Engine(example_policy)
    hot = Snapshot(1, {"eu-west": RegionState(utilization=5.0),
                       "eu-central": RegionState(utilization=5.0)})
    for c in range(0, 256, 4):
        decision = engine.decide("chat.infer.example.com",
                                 client_from_ecs(geolite2, f"2.2.{c}.0/24"), hot)
        assert set(decision.regions) <= {"eu-west", "eu-central"}
