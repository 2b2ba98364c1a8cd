# SPDX-License-Identifier: Apache-2.0
"""The published region load: table tests over frozen snapshots, and the arrival rate."""

from __future__ import annotations

import pytest

from regions.balancer.signals.load_report import ArrivalRate, region_load
from regions.balancer.types import RegionSnapshot
from tests.balancer.helpers import snap


def region(*backends) -> RegionSnapshot:
    return RegionSnapshot(tuple(snap(f"b{i}", i, **b) for i, b in enumerate(backends)), 1)


# (backends, queued, queued cost, rate, capacity) -> (capacity, utilization)
CASES = [
    pytest.param([{}, {}], 0, 0.0, 0.0, 10.0, 10.0, 0.0, id="idle"),
    pytest.param([{}, {}], 0, 0.0, 5.0, 10.0, 10.0, 0.5, id="half-by-rate"),
    pytest.param([{}, {"draining": True}], 0, 0.0, 4.0, 10.0, 5.0, 0.8, id="one-drained"),
    pytest.param([{"tokens_per_s": 150.0}, {"healthy": False}], 0, 0.0, 6.0, 8.0, 6.0, 1.0,
                 id="fast-one-left"),
    pytest.param([{"in_flight": 4}, {"in_flight": 4}], 4, 40.0, 1.0, 10.0, 10.0, 1.5,
                 id="queueing-is-over-capacity"),
    pytest.param([{"in_flight": 2}, {"in_flight": 2}], 0, 0.0, 3.0, None, 0.0, 0.5,
                 id="no-capacity-by-slots"),
    pytest.param([{"ejected": True}, {"draining": True}], 0, 0.0, 1.0, 10.0, 0.0, 1e6,
                 id="nothing-usable"),
]


@pytest.mark.parametrize(("backends", "queued", "cost", "rate", "cap", "capacity", "util"), CASES)
def test_region_load(backends, queued, cost, rate, cap, capacity, util) -> None:
    load = region_load(region(*backends), queued=queued, queued_cost_tokens=cost, rate=rate,
                       capacity_rps=cap, now=123.0)
    assert load.capacity == pytest.approx(capacity)
    assert load.utilization == pytest.approx(util)
    assert load.queue_depth == queued and load.timestamp == 123.0


def test_outstanding_seconds_counts_in_flight_and_queued_work() -> None:
    snapshot = region({"work_tokens": 100.0, "tokens_per_s": 50.0},
                      {"work_tokens": 30.0, "tokens_per_s": 150.0})
    load = region_load(snapshot, queued=2, queued_cost_tokens=200.0, rate=0.0,
                       capacity_rps=None, now=0.0)
    assert load.outstanding_seconds == pytest.approx(2.0 + 0.2 + 200.0 / 100.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_arrival_rate_follows_the_offered_load() -> None:
    clock = FakeClock()
    meter = ArrivalRate(tau_s=0.0, clock=clock)
    for _ in range(7):
        meter.arrived()
    clock.now = 2.0
    assert meter.tick() == pytest.approx(3.5)
    smooth = ArrivalRate(tau_s=2.0, clock=clock)
    for second in range(1, 31):
        for _ in range(4):
            smooth.arrived()
        clock.now = 2.0 + second
        smooth.tick()
    assert smooth.rate == pytest.approx(4.0, rel=1e-3)
    assert smooth.tick() == smooth.rate  # no time passed: unchanged
