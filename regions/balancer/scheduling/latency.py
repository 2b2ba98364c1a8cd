# SPDX-License-Identifier: Apache-2.0
"""Time to first token (TTFT) per backend, and the rule that calls one an outlier.

The proxy measures a backend's TTFT on every 200 answer: from sending the request to that
backend to the first byte of its body (the first token of a stream; the whole body of a
non-streamed answer, so a workload that mixes both makes the average noisier). The pool
folds it into the backend's ``Ewma`` (``ttft_ewma``, alpha ``TTFT_ALPHA``).

Outlier rule (``is_ttft_outlier``): a backend with at least ``min_samples`` samples is an
outlier when::

    ewma_b > factor * median(ewma_c for every other backend c with enough samples)
    and ewma_b > floor_s

The absolute floor keeps a fast fleet whole (5 ms against 2 ms is not worth a backend).
Without another backend with enough samples there is no baseline and nobody is an outlier.

``RegionTtft`` holds the region's EWMAs sorted, rebuilt at most every ``every_s``, so the
median of the others costs O(log n) per sample instead of a sort of the region.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping

from regions.balancer.scheduling.speed import Ewma

TTFT_ALPHA = 0.2
REGION_TTFT_EVERY_S = 0.1


def ttft_ewma() -> Ewma:
    """A fresh TTFT average (a backend starts with one, and again after a TTFT ejection)."""
    return Ewma(alpha=TTFT_ALPHA)


def is_ttft_outlier(ewma_s: float, baseline_s: float | None, factor: float, floor_s: float) -> bool:
    """True when ``ewma_s`` exceeds ``factor`` times the baseline and the absolute floor."""
    return baseline_s is not None and ewma_s > factor * baseline_s and ewma_s > floor_s


class RegionTtft:
    """The region's TTFT EWMAs (backends with enough samples), sorted, cached for
    ``every_s`` of the pool's clock."""

    __slots__ = ("_own", "_sorted", "every_s", "fresh_until")

    def __init__(self, every_s: float = REGION_TTFT_EVERY_S) -> None:
        self.every_s = every_s
        self.fresh_until = float("-inf")
        self._sorted: list[float] = []
        self._own: dict[str, float] = {}

    def stale(self, now: float) -> bool:
        return now >= self.fresh_until

    def invalidate(self) -> None:
        self.fresh_until = float("-inf")

    def rebuild(self, values: Mapping[str, float], now: float) -> None:
        """Take the current EWMAs, by backend name (names survive a re-indexed pool)."""
        self._own = dict(values)
        self._sorted = sorted(values.values())
        self.fresh_until = now + self.every_s

    def median_without(self, name: str) -> float | None:
        """Median of every cached EWMA but backend ``name``'s; None if there is none."""
        values = self._sorted
        own = self._own.get(name)
        if own is None:
            skip, n = len(values), len(values)
        else:
            skip, n = bisect.bisect_left(values, own), len(values) - 1
        if n == 0:
            return None

        def at(k: int) -> float:  # k-th value of the list without position ``skip``
            return values[k] if k < skip else values[k + 1]

        mid = n // 2
        return at(mid) if n % 2 else (at(mid - 1) + at(mid)) / 2
