# SPDX-License-Identifier: Apache-2.0
"""``weighted-random`` picker: a table of edge cases and frequencies with a fixed seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from regions.balancer.scheduling.pickers.weighted_random import WeightedRandomPicker
from regions.balancer.scheduling.registry import Registry, build_profile, register_builtin_plugins
from regions.balancer.types import RegionSnapshot
from tests.balancer.helpers import req, snap

DRAWS = 20_000


def frequencies(scores: list[float], seed: int = 0) -> list[float]:
    picker = WeightedRandomPicker(random.Random(seed))
    candidates = [snap(f"b{i}", i) for i in range(len(scores))]
    counts = Counter(picker.pick(candidates, scores) for _ in range(DRAWS))
    return [counts[i] / DRAWS for i in range(len(scores))]


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.3], [1.0]),
        ([1.0, 2.0, 7.0], [0.1, 0.2, 0.7]),
        ([0.0, 1.0, 0.0], [0.0, 1.0, 0.0]),
        ([-3.0, 1.0, 1.0], [0.0, 0.5, 0.5]),
        ([0.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]),
        ([1e-9, 1.0], [0.0, 1.0]),
    ],
    ids=[
        "single",
        "proportional",
        "zero-never-picked",
        "negative-counts-as-zero",
        "all-zero-uniform",
        "tiny-weight",
    ],
)
def test_frequencies(scores: list[float], expected: list[float]) -> None:
    observed = frequencies(scores)
    assert observed == pytest.approx(expected, abs=0.015), observed
    for score, share in zip(scores, observed, strict=True):
        if score <= 0 and any(s > 0 for s in scores):
            assert share == 0.0


def test_same_seed_same_picks_through_the_profile() -> None:
    registry = register_builtin_plugins(Registry())
    snapshot = RegionSnapshot(
        tuple(snap(f"b{i}", i, in_flight=i, cap=8) for i in range(4)), version=1
    )

    def picks(seed: int) -> list[str]:
        profile = build_profile(
            registry,
            scorers=(("queue-depth", 1.0),),
            picker="weighted-random",
            rng=random.Random(seed),
            sample=0,
        )
        return [profile.run(snapshot, req()).chosen.name for _ in range(200)]  # type: ignore[union-attr]

    first = picks(3)
    assert first == picks(3)
    assert first != picks(4)
    shares = Counter(first)
    # queue-depth scores 1, 7/8, 6/8, 5/8: the idle backend is the likeliest, none starves
    assert shares.most_common(1)[0][0] == "b0" and set(shares) == {"b0", "b1", "b2", "b3"}
