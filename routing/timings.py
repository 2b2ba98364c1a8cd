# SPDX-License-Identifier: Apache-2.0
"""Per-plugin run times of a profile, as a Prometheus histogram.

A profile times one run in ``every`` (the first, then every ``every``-th): a timed run reads
the clock around each plugin, which on the regional request path would cost more than some
plugins do, and a sample of runs gives the same distribution. ``observe`` is a bisect and
two additions; the Prometheus families are built only when scraped.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

BUCKETS_S = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2)


class PluginTimings:
    """Run-time histograms keyed by (stage, plugin), for one or more profiles."""

    def __init__(self, every: int = 1, buckets: tuple[float, ...] = BUCKETS_S) -> None:
        if every < 1:
            raise ValueError(f"every: at least 1, got {every}")
        self.every = every
        self.buckets = buckets
        self._countdown = 0
        self._counts: dict[tuple[str, str], list[int]] = {}
        self._sums: dict[tuple[str, str], float] = {}

    def due(self) -> bool:
        """Whether this run is one to time (one in ``every``)."""
        if self._countdown:
            self._countdown -= 1
            return False
        self._countdown = self.every - 1
        return True

    def observe(self, stage: str, plugin: str, seconds: float) -> None:
        key = (stage, plugin)
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = [0] * (len(self.buckets) + 1)
            self._sums[key] = 0.0
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self._sums[key] += seconds

    def count(self, stage: str, plugin: str) -> int:
        return sum(self._counts.get((stage, plugin), ()))

    def families(self, name: str, documentation: str) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(name, documentation, labels=["stage", "plugin"])
        for (stage, plugin), counts in sorted(self._counts.items()):
            cumulative, running = [], 0
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                cumulative.append((_bound(bound), running))
            family.add_metric([stage, plugin], cumulative, self._sums[(stage, plugin)])
        yield family


class TimingsCollector(Collector):
    """Exports a ``PluginTimings`` as the histogram ``name``."""

    def __init__(self, name: str, documentation: str, timings: PluginTimings) -> None:
        self.timings, self.name, self.documentation = timings, name, documentation

    def collect(self) -> Iterator[HistogramMetricFamily]:
        yield from self.timings.families(self.name, self.documentation)


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
