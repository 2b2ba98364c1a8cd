# SPDX-License-Identifier: Apache-2.0
"""The TTFT outlier rule, the region's median "of the others", and the pool's TTFT
ejection: when it fires, when it must not, and how a backend comes back."""

from __future__ import annotations

import pytest

from regions.balancer.scheduling.backend import BackendSpec, OutlierConfig
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.latency import RegionTtft, is_ttft_outlier

RULE_CASES = [
    # (id, ewma, baseline, factor, floor, outlier)
    ("far-above", 2.0, 0.2, 3.0, 0.5, True),
    ("just-under-factor", 0.6, 0.2, 3.0, 0.5, False),
    ("at-factor-is-not-above", 0.75, 0.25, 3.0, 0.5, False),
    ("fast-fleet-under-floor", 0.005, 0.002, 2.0, 0.5, False),
    ("above-factor-under-floor", 0.4, 0.01, 3.0, 0.5, False),
    ("floor-zero", 0.05, 0.01, 3.0, 0.0, True),
    ("no-baseline", 9.0, None, 3.0, 0.5, False),
]


@pytest.mark.parametrize(
    ("ewma", "baseline", "factor", "floor", "outlier"),
    [c[1:] for c in RULE_CASES],
    ids=[c[0] for c in RULE_CASES],
)
def test_outlier_rule(ewma, baseline, factor, floor, outlier) -> None:
    assert is_ttft_outlier(ewma, baseline, factor, floor) is outlier


MEDIAN_CASES = [
    # (id, EWMAs by backend name, name left out, median of the others)
    ("two-backends", {"a": 5.0, "b": 1.0}, "a", 1.0),
    ("three-odd-others", {"a": 9.0, "b": 1.0, "c": 3.0}, "a", 2.0),
    ("four-drop-middle", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 10.0}, "b", 3.0),
    ("four-drop-lowest", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 10.0}, "a", 3.0),
    ("four-drop-highest", {"a": 1.0, "b": 2.0, "c": 3.0, "d": 10.0}, "d", 2.0),
    ("duplicates", {"a": 2.0, "b": 2.0, "c": 2.0, "d": 8.0}, "b", 2.0),
    ("not-cached-uses-all", {"b": 1.0, "c": 3.0}, "a", 2.0),
    ("alone", {"a": 4.0}, "a", None),
    ("empty", {}, "a", None),
]


@pytest.mark.parametrize(
    ("values", "name", "expected"),
    [c[1:] for c in MEDIAN_CASES],
    ids=[c[0] for c in MEDIAN_CASES],
)
def test_median_of_the_others(values, name, expected) -> None:
    region = RegionTtft()
    region.rebuild(values, now=0.0)
    assert region.median_without(name) == expected


def test_region_cache_expires() -> None:
    region = RegionTtft(every_s=0.1)
    assert region.stale(0.0)
    region.rebuild({"a": 1.0}, now=10.0)
    assert not region.stale(10.05) and region.stale(10.1)
    region.invalidate()
    assert region.stale(10.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool(n: int = 3, clock: FakeClock | None = None, **outliers: float) -> BackendPool:
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", ("m",), 4) for i in range(n)]
    fields = {"ttft_factor": 3.0, "ttft_min_samples": 3, "ttft_floor_s": 0.1}
    fields.update(outliers)
    return BackendPool(specs, outliers=OutlierConfig(**fields), clock=clock or FakeClock())


def feed(p: BackendPool, name: str, seconds: float, n: int) -> list[bool]:
    return [p.record_ttft(p[name], seconds) for _ in range(n)]


def test_a_slow_backend_is_ejected_then_returns_through_slow_start() -> None:
    clock = FakeClock()
    p = pool(3, clock, base_ejection_s=10.0, slow_start_s=8.0)
    feed(p, "b1", 0.2, 3)
    feed(p, "b2", 0.3, 3)
    clock.now += 0.1  # the region's cached EWMAs are renewed
    # b0: 2 s against the others' median 0.25 s; judged from its third sample on
    assert feed(p, "b0", 2.0, 3) == [False, False, True]
    b0 = p["b0"]
    assert b0.ejected_for == "ttft" and b0.ejections == 1
    assert b0.ttft.samples == 0  # judged again on fresh samples only
    view = p.snapshot().backends[0]
    assert view.ejected and view.ttft_ewma_s is None and view.ttft_samples == 0
    assert not p.record_ttft(b0, 5.0)  # a late sample from before the ejection: ignored
    assert b0.ttft.samples == 0
    clock.now += 10.1
    view = p.snapshot().backends[0]
    assert not view.ejected and view.cap == 1  # slow start
    assert feed(p, "b0", 0.25, 5) == [False] * 5  # healthy again: stays in
    assert not p.snapshot().backends[0].ejected


def test_no_ejection_before_enough_samples_or_below_the_floor() -> None:
    p = pool(3, ttft_min_samples=5, ttft_floor_s=0.5)
    feed(p, "b1", 0.01, 5)
    feed(p, "b2", 0.01, 5)
    assert feed(p, "b0", 0.4, 10) == [False] * 10  # 40x the others, under the floor
    p = pool(3, ttft_min_samples=5)
    feed(p, "b1", 0.2, 5)
    feed(p, "b2", 0.2, 5)
    assert feed(p, "b0", 5.0, 4) == [False] * 4  # not enough samples yet
    assert p.record_ttft(p["b0"], 5.0)


def test_no_baseline_no_ejection() -> None:
    p = pool(3)
    feed(p, "b1", 0.2, 2)  # under ttft_min_samples: not part of the baseline
    assert feed(p, "b0", 9.0, 6) == [False] * 6
    single = pool(1)
    assert feed(single, "b0", 9.0, 6) == [False] * 6


def test_factor_zero_turns_it_off() -> None:
    p = pool(2, ttft_factor=0.0)
    feed(p, "b1", 0.2, 5)
    assert feed(p, "b0", 9.0, 10) == [False] * 10


def test_the_ejection_budget_is_shared_with_error_ejections() -> None:
    clock = FakeClock()
    p = pool(2, clock, consecutive_errors=1, max_ejected_fraction=0.5, base_ejection_s=5.0)
    feed(p, "b0", 0.2, 3)
    feed(p, "b1", 0.2, 3)
    clock.now += 0.1
    assert p.record_failure(p["b1"])  # b1 ejected for errors: the budget (1 of 2) is spent
    assert feed(p, "b0", 5.0, 5) == [False] * 5
    assert not p.snapshot().backends[0].ejected
    clock.now += 5.0  # b1 is back: b0 is ejected at its next slow sample
    assert p.record_ttft(p["b0"], 5.0)


def test_a_region_wide_slowdown_ejects_nobody() -> None:
    clock = FakeClock()
    p = pool(3, clock)
    for name in ("b0", "b1", "b2"):
        feed(p, name, 0.2, 3)
    for _ in range(30):  # every backend goes 10x slower at once
        clock.now += 0.05
        for name in ("b0", "b1", "b2"):
            assert not p.record_ttft(p[name], 2.0)
    assert all(b.ttft.value > 1.9 for b in p)


def test_ttft_samples_reach_the_snapshot_with_the_next_rebuild_only() -> None:
    p = pool(2)
    first = p.snapshot()
    p.record_ttft(p["b0"], 0.3)
    assert p.snapshot() is first  # a sample alone does not rebuild anything
    p.lease(0, 1.0).release()  # its request's release does
    view = p.snapshot().backends[0]
    assert (view.ttft_ewma_s, view.ttft_samples) == (pytest.approx(0.3), 1)
    p.record_ttft(p["b0"], 0.8)
    with p.lease(0, 1.0):
        pass
    assert p.snapshot().backends[0].ttft_ewma_s == pytest.approx(0.3 + 0.2 * 0.5)


def test_a_busy_backend_is_not_sampled() -> None:
    """First tokens at a backend bound past ``ttft_max_occupancy`` wait for its running
    requests (slots, KV, their prefills): they measure load, not health."""
    p = pool(3, ttft_max_occupancy=0.5)
    feed(p, "b1", 0.2, 3)
    feed(p, "b2", 0.2, 3)
    b0 = p["b0"]
    assert [p.record_ttft(b0, 5.0, occupancy=1.25) for _ in range(10)] == [False] * 10
    assert b0.ttft.samples == 0 and b0.ejections == 0
    assert [p.record_ttft(b0, 5.0, occupancy=0.5) for _ in range(3)] == [False, False, True]
    assert b0.ejected_for == "ttft"


def test_a_lease_knows_how_full_its_backend_was() -> None:
    p = pool(1)  # cap 4, prefetch 1
    leases = [p.lease(0, 10.0) for _ in range(5)]
    assert [lease.occupancy for lease in leases] == [0.25, 0.5, 0.75, 1.0, 1.25]
    for lease in leases:
        lease.release()
    assert p.lease(0, 10.0).occupancy == 0.25
