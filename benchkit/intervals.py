# SPDX-License-Identifier: Apache-2.0
"""Intervals for benchmark ratios: a claim is judged by where its whole interval lies.

- ``median_interval``: the median of per-slice ratios of one cell with a percentile
  bootstrap interval (slices resampled with replacement);
- ``geomean_interval``: the geometric mean pooled over cells with a two-stage cluster
  bootstrap (cells resampled, then each drawn cell's slices), so that cells with many
  slices do not pass for independent evidence and the spread between cells counts;
- ``worst_share_mean``: the mean of the worst 1 % of a latency sample, a tail figure that
  moves less from slice to slice than the 99th percentile's one order statistic;
- ``Interval.side``: ``met``, ``missed`` or ``undecided`` (the interval straddles the
  threshold: not a win and not a loss; the sequential matrix adds slices to such cells);
- ``sign_test_p`` and ``holm``: whether a cell's median ratio is above a bound, tested
  exactly (a sign test needs no shape of the slices' spread) and corrected for the number
  of cells tested at once (Holm), so that one cell in 192 is not a loss by chance.

Resampling is seeded, so a result file summarises the same way every time.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

LEVEL = 0.95
RESAMPLES = 2000
Side = Literal["met", "missed", "undecided"]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided interval (``low`` <= ``point`` <= ``high``)."""

    point: float
    low: float
    high: float

    def side(self, threshold: float, *, lower_is_better: bool = True) -> Side:
        """Whether the whole interval is on the good side of ``threshold`` (inclusive),
        the whole of it on the bad side, or neither."""
        good_low, good_high = (self.high <= threshold, self.low > threshold) \
            if lower_is_better else (self.low >= threshold, self.high < threshold)
        return "met" if good_low else "missed" if good_high else "undecided"

    def straddles(self, threshold: float) -> bool:
        return self.low <= threshold <= self.high

    def text(self, digits: int = 2) -> str:
        return f"{self.point:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_json(self) -> dict[str, float]:
        return {"point": self.point, "low": self.low, "high": self.high}


def median_interval(values: Sequence[float], level: float = LEVEL,
                    resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The median of ``values`` with a percentile bootstrap interval. With n values the
    interval cannot be narrower than the data allow: with 3 it is close to [min, max]."""
    data = [float(v) for v in values]
    if not data:
        raise ValueError("no values")
    rng = random.Random(seed)
    n = len(data)
    draws = [statistics.median(rng.choices(data, k=n)) for _ in range(resamples)]
    low, high = _percentiles(draws, level)
    return Interval(statistics.median(data), low, high)


def geomean_interval(clusters: Sequence[Sequence[float]], level: float = LEVEL,
                     resamples: int = RESAMPLES, seed: int = 0) -> Interval:
    """The geometric mean of every positive ratio in ``clusters`` (each cluster a cell's
    per-slice ratios) with a two-stage cluster bootstrap interval."""
    logs = [[math.log(v) for v in cluster] for cluster in clusters if cluster]
    if not logs:
        raise ValueError("no values")
    rng = random.Random(seed)
    point = _mean_of_all(logs)
    draws = []
    for _ in range(resamples):
        picked = rng.choices(logs, k=len(logs))
        draws.append(_mean_of_all([rng.choices(c, k=len(c)) for c in picked]))
    low, high = _percentiles(draws, level)
    return Interval(math.exp(point), math.exp(low), math.exp(high))


def worst_share_mean(values: Sequence[float], share: float = 0.01) -> float:
    """The mean of the largest ``share`` of ``values`` (at least one value); NaN if empty."""
    if not values:
        return float("nan")
    count = max(1, math.ceil(share * len(values)))
    return statistics.fmean(sorted(values)[-count:])


def sign_test_p(values: Sequence[float], bound: float) -> float:
    """One-sided exact sign test of "the median is at most ``bound``": the chance of as many
    values above ``bound`` as seen if each were above it with probability one half (values
    equal to the bound are dropped)."""
    above = sum(v > bound for v in values)
    n = above + sum(v < bound for v in values)
    if n == 0:
        return 1.0
    return math.fsum(math.comb(n, k) for k in range(above, n + 1)) / 2 ** n


def holm(p_values: Sequence[float], alpha: float = 1 - LEVEL) -> list[bool]:
    """Holm's step-down correction: which of ``p_values`` are rejected at family-wise error
    ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def _mean_of_all(groups: Sequence[Sequence[float]]) -> float:
    return math.fsum(v for g in groups for v in g) / sum(len(g) for g in groups)


def _percentiles(draws: list[float], level: float) -> tuple[float, float]:
    ordered = sorted(draws)
    tail = (1 - level) / 2
    last = len(ordered) - 1
    return (ordered[max(0, math.floor(tail * last))],
            ordered[min(last, math.ceil((1 - tail) * last))])
