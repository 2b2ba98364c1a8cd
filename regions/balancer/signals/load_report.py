# SPDX-License-Identifier: Apache-2.0
"""The load a region's balancer publishes for the global tier's spillover (about once a second).

``ArrivalRate`` counts requests as they arrive (served, queued or shed alike: the offered
load) and turns the count into a rate at each tick, smoothed over ``tau_s`` seconds::

    sample = arrivals since the last tick / seconds since the last tick
    rate  <- rate + (1 - exp(-dt / tau_s)) * (sample - rate)

``region_load`` turns a frozen pool snapshot and the queue into a ``RegionLoad``. A backend
is usable when healthy, not ejected and not draining; its throughput is
``tokens_per_s * cap`` (learned decode rate times slots)::

    usable_share  = usable throughput / total throughput        (1.0 when nothing is down)
    capacity      = capacity_rps * usable_share                 (0.0 when not configured)
    outstanding_s = sum_b work_tokens_b / tokens_per_s_b + queued cost / mean tokens_per_s
    pressure      = 1 + queued / usable slots   when requests wait in the region queue, else 0
    utilization   = max(rate / capacity, pressure)              with a capacity
                  = (in_flight + queued) / usable slots         without one

so a region whose GPUs are drained or down reports a lower capacity and a higher
utilization, and a region that queues is at or above 100% whatever its rate says.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from regions.balancer.types import RegionSnapshot
from state.records import RegionLoad

DEFAULT_TAU_S = 5.0


class ArrivalRate:
    """Arrivals per second, smoothed; ``arrived()`` on the hot path, ``tick()`` once a second."""

    __slots__ = ("_clock", "_count", "_last", "rate", "tau_s")

    def __init__(
        self, tau_s: float = DEFAULT_TAU_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.tau_s = tau_s
        self.rate = 0.0
        self._count = 0
        self._clock = clock
        self._last = clock()

    def arrived(self) -> None:
        self._count += 1

    def tick(self) -> float:
        """Fold the arrivals since the last tick into ``rate`` and return it."""
        now = self._clock()
        dt = now - self._last
        if dt <= 0:
            return self.rate
        sample = self._count / dt
        alpha = 1.0 - math.exp(-dt / self.tau_s) if self.tau_s > 0 else 1.0
        self.rate += alpha * (sample - self.rate)
        self._count = 0
        self._last = now
        return self.rate


def region_load(
    snapshot: RegionSnapshot,
    *,
    queued: int,
    queued_cost_tokens: float,
    rate: float,
    capacity_rps: float | None,
    now: float,
) -> RegionLoad:
    """The region's aggregate load (formulas in the module docstring); pure."""
    backends = snapshot.backends
    usable = [b for b in backends if b.usable]
    total_tp = sum(b.tokens_per_s * b.cap for b in backends)
    usable_tp = sum(b.tokens_per_s * b.cap for b in usable)
    share = usable_tp / total_tp if total_tp > 0 else 0.0
    in_flight = sum(b.in_flight for b in backends)
    slots = sum(b.cap for b in usable)
    mean_rate = sum(b.tokens_per_s for b in backends) / len(backends) if backends else 0.0
    outstanding = sum(b.outstanding_s for b in backends)
    if queued_cost_tokens > 0 and mean_rate > 0:
        outstanding += queued_cost_tokens / mean_rate
    pressure = (1.0 + queued / slots if slots else math.inf) if queued else 0.0
    if capacity_rps:
        capacity = capacity_rps * share
        by_rate = rate / capacity if capacity > 0 else (math.inf if rate > 0 else 0.0)
        utilization = max(by_rate, pressure)
    else:
        capacity = 0.0
        busy = in_flight + queued
        utilization = busy / slots if slots else (math.inf if busy else 0.0)
    return RegionLoad(
        queue_depth=float(queued),
        in_flight=float(in_flight),
        outstanding_seconds=outstanding,
        capacity=capacity,
        utilization=_finite(utilization),
        timestamp=now,
    )


def _finite(value: float, ceiling: float = 1e6) -> float:
    """Redis fields and the spillover maths want a number: a dead region is 'very full'."""
    return ceiling if math.isinf(value) else value
