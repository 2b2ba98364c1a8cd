# SPDX-License-Identifier: Apache-2.0
"""Intervals for routing claims: they cover the true value about as often as they say,
the pooled one widens with the spread between cells, and a claim is a win only when the
whole interval is on its side."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from benchkit.intervals import (
    Interval,
    geomean_interval,
    holm,
    median_interval,
    sign_test_p,
    worst_share_mean,
)


def test_the_median_interval_covers_the_true_median_about_as_often_as_it_says() -> None:
    rng = random.Random(7)
    covered = 0
    trials = 200
    for trial in range(trials):
        sample = [rng.lognormvariate(0.0, 0.3) for _ in range(25)]  # true median 1.0
        interval = median_interval(sample, resamples=400, seed=trial)
        covered += interval.low <= 1.0 <= interval.high
    assert 0.88 <= covered / trials <= 0.995


def test_three_slices_give_an_interval_close_to_their_range() -> None:
    interval = median_interval([0.9, 1.02, 1.2])
    assert interval.point == pytest.approx(1.02)
    assert (interval.low, interval.high) == (0.9, 1.2)


def test_the_pooled_interval_widens_with_the_spread_between_cells() -> None:
    rng = random.Random(3)
    alike = [[rng.lognormvariate(0.0, 0.05) for _ in range(3)] for _ in range(24)]
    apart = [[c * v for v in cell] for c, cell in
             zip((rng.lognormvariate(0.0, 0.4) for _ in range(24)), alike, strict=True)]
    narrow, wide = geomean_interval(alike), geomean_interval(apart)
    assert narrow.low < narrow.point < narrow.high
    assert (wide.high - wide.low) > 4 * (narrow.high - narrow.low)
    # the point is the geometric mean of every ratio
    every = [v for cell in alike for v in cell]
    assert narrow.point == pytest.approx(math.exp(statistics.fmean(map(math.log, every))))


def test_the_pooled_interval_covers_the_true_ratio_about_as_often_as_it_says() -> None:
    rng = random.Random(11)
    covered = 0
    trials = 120
    for trial in range(trials):
        # 20 cells, each with its own true ratio around 1.0, 3 noisy slices each: the
        # population geometric mean is 1.0
        cells = [[c * rng.lognormvariate(0.0, 0.1) for _ in range(3)]
                 for c in (rng.lognormvariate(0.0, 0.2) for _ in range(20))]
        interval = geomean_interval(cells, resamples=300, seed=trial)
        covered += interval.low <= 1.0 <= interval.high
    assert 0.85 <= covered / trials <= 1.0


def test_a_claim_is_met_only_when_the_whole_interval_is_on_its_side() -> None:
    assert Interval(0.9, 0.85, 0.98).side(1.05) == "met"
    assert Interval(1.0, 0.95, 1.07).side(1.05) == "undecided"
    assert Interval(1.2, 1.1, 1.3).side(1.05) == "missed"
    # higher is better (throughput against a 0.99 floor)
    assert Interval(1.0, 0.995, 1.01).side(0.99, lower_is_better=False) == "met"
    assert Interval(1.0, 0.97, 1.01).side(0.99, lower_is_better=False) == "undecided"
    assert Interval(0.9, 0.85, 0.95).side(0.99, lower_is_better=False) == "missed"
    assert Interval(1.0, 0.97, 1.01).straddles(0.99)


def test_resampling_is_seeded() -> None:
    values = [[1.1, 0.9, 1.3], [0.7, 0.8], [1.0, 1.2, 1.05]]
    assert geomean_interval(values, seed=5) == geomean_interval(values, seed=5)
    assert median_interval(values[0], seed=5) == median_interval(values[0], seed=5)


def test_the_worst_share_mean_averages_the_tail() -> None:
    values = list(range(1, 201))  # the worst 1 % of 200 values: 199 and 200
    assert worst_share_mean(values) == pytest.approx(199.5)
    assert worst_share_mean([3.0]) == 3.0
    assert math.isnan(worst_share_mean([]))
    with pytest.raises(ValueError):
        median_interval([])


def test_the_sign_test_is_exact_and_holm_corrects_for_many_cells() -> None:
    assert sign_test_p([1.2] * 5, 1.05) == pytest.approx(1 / 32)
    assert sign_test_p([1.2, 1.2, 1.2, 1.0, 1.2], 1.05) == pytest.approx(6 / 32)
    assert sign_test_p([1.0, 0.9], 1.05) == 1.0
    assert sign_test_p([1.05, 1.05], 1.05) == 1.0  # ties tell nothing
    # one p-value of 0.001 among 10: rejected (0.001 <= 0.05 / 10); 0.01 next is not
    # (> 0.05 / 9), and so nothing after it is
    assert holm([0.3, 0.001, 0.01, 0.5, 0.2, 0.9, 0.7, 0.6, 0.8, 0.4]) == \
        [False, True, False, False, False, False, False, False, False, False]
    assert holm([0.001, 0.002]) == [True, True]
    # five slices all above the bound cannot convict one cell of 192 (1/32 > 0.05 / 192)
    assert holm([sign_test_p([1.3] * 5, 1.05)] + [1.0] * 191) == [False] * 192
