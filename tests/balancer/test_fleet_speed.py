# SPDX-License-Identifier: Apache-2.0
"""Speeds on one fleet-wide step-time shape: a mixed fleet's speeds come out within 10 %
of the truth whatever slot counts hide them; a fleet of like GPUs is called alike; known
speeds can be told."""

from __future__ import annotations

import math
import random

import pytest

from regions.balancer.scheduling.fleet_speed import FleetSpeed

BASE, SLOPE = 0.012, 0.00042  # the simulator's shape: 12 ms, 3.5 % of it per stream


def feed(fleet: FleetSpeed, speeds: list[float], slots: list[int], samples: int,
         rng: random.Random, noise: float = 0.08) -> None:
    """Each backend's streams, at concurrencies its slot count allows (a 256-slot server
    runs 60-120 at once, a 16-slot one 4-16), their time per token off by ``noise``."""
    for _ in range(samples):
        for i, (speed, n) in enumerate(zip(speeds, slots, strict=True)):
            concurrency = rng.uniform(0.25 * n, 0.5 * n) if n > 16 else rng.uniform(4, n)
            y = (BASE + SLOPE * concurrency) / speed * rng.lognormvariate(0.0, noise)
            fleet.observe(f"gpu{i}", concurrency, y)


def ratios(fleet: FleetSpeed, reference: str = "gpu0") -> list[float]:
    return [fleet.speeds[name].estimate / fleet.speeds[reference].estimate
            for name in sorted(fleet.speeds)]


@pytest.mark.parametrize("seed", range(5))
def test_a_mixed_fleet_is_learned_within_ten_percent_whatever_its_slots(seed: int) -> None:
    """Speeds 1, 1, 0.6, 0.6, 0.4, 0.4 on 256, 16, 64, 256, 16, 64 slots: per backend,
    the 256-slot fast GPU (~90 streams, 50 ms a token) takes longer a token than the
    16-slot slow one (~10 streams, 41 ms) and would look the slower."""
    speeds, slots = [1.0, 1.0, 0.6, 0.6, 0.4, 0.4], [256, 16, 64, 256, 16, 64]
    fleet = FleetSpeed()
    feed(fleet, speeds, slots, 40, random.Random(seed))
    assert fleet.refit(0.0)
    for learned, true in zip(ratios(fleet), speeds, strict=True):
        assert learned == pytest.approx(true, rel=0.10)
    # different where the intervals say so: the fast and the slow ones
    assert fleet.speeds["gpu0"].used > 1.0 and fleet.speeds["gpu4"].used < 1.0
    assert fleet.seconds_per_token("gpu0", 100.0) == pytest.approx(
        (fleet.base + fleet.slope * 100) / fleet.speeds["gpu0"].estimate)


@pytest.mark.parametrize("seed", range(5))
def test_a_fleet_of_like_gpus_is_called_alike(seed: int) -> None:
    fleet = FleetSpeed()
    feed(fleet, [1.0] * 6, [256, 16, 64, 256, 16, 64], 40, random.Random(100 + seed))
    fleet.refit(0.0)
    assert all(s.used == 1.0 for s in fleet.speeds.values()), fleet.speeds
    assert fleet.line("gpu3") == (fleet.base, fleet.slope)


def test_a_backend_with_few_samples_is_the_fleets_until_it_has_enough() -> None:
    fleet = FleetSpeed(min_samples=4)
    rng = random.Random(1)
    feed(fleet, [1.0, 0.5], [64, 64], 30, rng)
    fleet.observe("gpu2", 10.0, 0.5)  # one sample, ten times slow: not enough to say
    fleet.refit(0.0)
    assert fleet.speeds["gpu2"].used == 1.0 and fleet.speeds["gpu2"].samples == 1
    assert ratios(fleet)[1] == pytest.approx(0.5, rel=0.1)


def test_the_fit_is_redone_at_most_once_a_period_and_only_after_a_sample() -> None:
    fleet = FleetSpeed(refit_s=1.0)
    assert not fleet.refit(0.0)  # nothing to fit
    assert fleet.seconds_per_token("gpu0", 1.0) is None and fleet.line("gpu0") is None
    fleet.observe("gpu0", 1.0, 0.012)
    assert fleet.refit(5.0)
    fleet.observe("gpu0", 1.0, 0.013)
    assert not fleet.refit(5.5) and fleet.refit(6.0) and not fleet.refit(8.0)


def test_told_speeds_replace_the_learned_ones() -> None:
    fleet = FleetSpeed()
    feed(fleet, [1.0, 0.5], [64, 64], 20, random.Random(2))
    fleet.tell({"gpu0": 1.0, "gpu1": 0.5})
    fleet.refit(0.0)
    assert ratios(fleet) == pytest.approx([1.0, 0.5])
    assert fleet.speeds["gpu0"].estimate == pytest.approx(math.sqrt(2))  # geometric mean 1
    assert fleet.speeds["gpu0"].used == pytest.approx(math.sqrt(2))


def test_bad_samples_are_ignored() -> None:
    fleet = FleetSpeed()
    for c, y in ((0.0, 0.01), (1.0, 0.0), (1.0, -1.0), (1.0, math.inf), (1.0, math.nan)):
        fleet.observe("gpu0", c, y)
    assert not fleet.refit(0.0)
