# SPDX-License-Identifier: Apache-2.0
"""A region's GPU speeds: one step-time shape for the fleet, one speed scalar per backend.

A stream's time per token is the time of one engine iteration, and an iteration takes
longer the more sequences it decodes. Taken backend by backend, a 16-slot server whose batch
stays small looks fast and a 256-slot server with a hundred streams looks slow, whatever
their GPUs; and a backend whose concurrency hardly moves cannot tell its speed from its
batch. So the samples of every backend are fitted together::

    seconds_per_token(backend i, concurrency c) = (base + slope * c) / speed_i

with the speeds' geometric mean 1: the shape comes from every backend's samples, and a
backend's speed from how its samples sit against it. In logs the model is
``log y = log base - log speed_i + log(1 + r * c)`` with ``r = slope / base``; for a given
``r`` each backend's ``log base - log speed_i`` is the mean of its samples' ``log y - log(1 +
r c)`` (least squares), so the fit is a one-dimensional search for the ``r`` with the least
squared error (golden section over ``log r``), ``r`` learned from how each backend's time
per token moves with its own concurrency. Each speed has a t interval from its samples'
spread; a backend is called faster or slower only when its whole interval is more than
``SAME_WITHIN`` (10 %, what the estimate claims to resolve) from the fleet's 1.0, else it
gets 1.0, so that on a fleet of like GPUs the speed-aware scorers see no differences to act
on (they abstain). The interval does not count the shape's own error, which is what the
margin absorbs: on like GPUs the estimates scatter a few percent.

``tell`` replaces the learned speeds by known ones (the routing matrix's told-speeds arm,
which measures what learning them costs). Samples are the last ``window`` of each backend;
the fit is redone at most once per ``refit_s``, when a sample has come in since.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

# two-sided 95 % Student t quantiles by degrees of freedom (beyond the last: 1.96)
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}
SAME_WITHIN = 0.10  # speeds closer than this to the fleet's are the fleet's
_RATIO_RANGE = (1e-5, 10.0)  # slope / base searched: per stream, 0.001 % to 10x the base
_STEPS = 40  # golden-section steps: the ratio to within 0.01 % of its log range
# The search for the ratio reads each sample some 40 times: it reads each backend's newest
# samples, this many in all (every sample up to 16 backends), and a fit over more samples
# than REFIT_SAMPLES waits proportionally longer than ``refit_s``, so that a region of a
# thousand backends does not spend most of each second of its event loop fitting.
RATIO_SAMPLES = 1024
REFIT_SAMPLES = 4096


@dataclass(frozen=True)
class Speed:
    """A backend's speed relative to the fleet (geometric mean 1.0) and its 95 % interval;
    ``used`` is what scorers get: ``estimate`` if the whole interval is more than
    ``SAME_WITHIN`` from 1.0, else 1.0."""

    estimate: float
    low: float
    high: float
    samples: int

    @property
    def used(self) -> float:
        margin = 1.0 + SAME_WITHIN
        return self.estimate if self.low > margin or self.high < 1 / margin else 1.0


@dataclass
class FleetSpeed:
    """Speeds of one region's backends (by name) on a shared step-time shape (see the
    module)."""

    window: int = 64
    min_samples: int = 4  # a backend's, before it has an estimate (1.0 until then)
    refit_s: float = 1.0
    base: float | None = None  # seconds per token at concurrency 0, for speed 1.0
    slope: float = 0.0
    speeds: dict[str, Speed] = field(default_factory=dict)
    _samples: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    _told: dict[str, float] | None = None
    _dirty: bool = False
    _fitted_at: float = -math.inf

    def observe(self, backend: str, concurrency: float, seconds_per_token: float) -> None:
        """One stream's time per token at the mean concurrency it decoded beside."""
        if seconds_per_token <= 0 or concurrency <= 0 or not math.isfinite(seconds_per_token):
            return
        samples = self._samples.get(backend)
        if samples is None:
            samples = self._samples[backend] = deque(maxlen=self.window)
        samples.append((concurrency, seconds_per_token))
        self._dirty = True

    def tell(self, speeds: Mapping[str, float]) -> None:
        """Known speeds (any scale: they are normalised) instead of learned ones."""
        self._told = dict(speeds)
        self._dirty = True

    def refit(self, now: float) -> bool:
        """Fit again if a sample came in and ``refit_s`` has passed (longer for a fit over
        more than ``REFIT_SAMPLES``); True if it did."""
        if not self._dirty:
            return False
        held = sum(len(s) for s in self._samples.values())
        if now - self._fitted_at < self.refit_s * max(1.0, held / REFIT_SAMPLES):
            return False
        self._fitted_at = now
        self._dirty = False
        self._fit()
        return True

    def seconds_per_token(self, backend: str, concurrency: float) -> float | None:
        """The fitted time per token of ``backend`` at ``concurrency`` (None: no fit yet)."""
        line = self.line(backend)
        return None if line is None else line[0] + line[1] * concurrency

    def line(self, backend: str) -> tuple[float, float] | None:
        """(base, slope) of ``backend``'s time per token (``BackendSnapshot.spt_*``)."""
        if self.base is None:
            return None
        speed = self.speeds.get(backend)
        used = speed.used if speed else 1.0
        return self.base / used, self.slope / used

    # -- fitting --------------------------------------------------------------------------

    def _fit(self) -> None:
        groups = {b: [(c, math.log(y)) for c, y in s] for b, s in self._samples.items() if s}
        if not groups:
            return
        per_backend = max(2, RATIO_SAMPLES // len(groups))
        ratio = _best_ratio({b: s[-per_backend:] for b, s in groups.items()})
        means = {b: statistics.fmean(_offsets(s, ratio)) for b, s in groups.items()}
        told = _normalised(self._told) if self._told is not None else None
        if told is not None:  # log base - log speed_i = mean_i, with the speeds known
            log_speed = {b: math.log(told.get(b, 1.0)) for b in groups}
            log_base = statistics.fmean(means[b] + log_speed[b] for b in groups)
        else:
            estimated = [m for b, m in means.items() if len(groups[b]) >= self.min_samples]
            log_base = statistics.fmean(estimated) if estimated else statistics.fmean(
                means.values())
            log_speed = {b: log_base - means[b] if len(groups[b]) >= self.min_samples
                         else 0.0 for b in groups}
        self.base = math.exp(log_base)
        self.slope = self.base * ratio
        self.speeds = {b: self._speed(s, ratio, means[b], log_speed[b], told is not None)
                       for b, s in groups.items()}

    def _speed(self, samples: list[tuple[float, float]], ratio: float, mean: float,
               log_speed: float, told: bool) -> Speed:
        n = len(samples)
        if told:
            value = math.exp(log_speed)
            return Speed(value, value, value, n)
        if n < self.min_samples:
            return Speed(1.0, 0.0, math.inf, n)
        spread = statistics.stdev(_offsets(samples, ratio), mean) if n > 1 else math.inf
        half = _t95(n - 1) * spread / math.sqrt(n)
        return Speed(math.exp(log_speed), math.exp(log_speed - half),
                     math.exp(log_speed + half), n)


def _offsets(samples: list[tuple[float, float]], ratio: float) -> list[float]:
    """``log y - log(1 + ratio * c)`` per (concurrency, log time per token) sample."""
    return [log_y - math.log1p(ratio * c) for c, log_y in samples]


def _error(groups: Mapping[str, list[tuple[float, float]]], ratio: float) -> float:
    """Squared error of the best fit with ``ratio`` (each backend at its own mean)."""
    total = 0.0
    for samples in groups.values():
        offsets = _offsets(samples, ratio)
        mean = statistics.fmean(offsets)
        total += math.fsum((o - mean) ** 2 for o in offsets)
    return total


def _best_ratio(groups: Mapping[str, list[tuple[float, float]]]) -> float:
    """The slope-to-base ratio with the least squared error: golden section over its log
    between ``_RATIO_RANGE``, then 0 if no ratio beats a flat line."""
    low, high = (math.log(r) for r in _RATIO_RANGE)
    golden = (math.sqrt(5) - 1) / 2
    a, b = high - golden * (high - low), low + golden * (high - low)
    fa, fb = _error(groups, math.exp(a)), _error(groups, math.exp(b))
    for _ in range(_STEPS):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - golden * (high - low)
            fa = _error(groups, math.exp(a))
        else:
            low, a, fa = a, b, fb
            b = low + golden * (high - low)
            fb = _error(groups, math.exp(b))
    best = math.exp((low + high) / 2)
    return best if _error(groups, best) < _error(groups, 0.0) else 0.0


def _normalised(speeds: Mapping[str, float]) -> dict[str, float]:
    positive = {b: v for b, v in speeds.items() if v > 0}
    if not positive:
        return {}
    centre = statistics.fmean(math.log(v) for v in positive.values())
    return {b: v / math.exp(centre) for b, v in positive.items()}


def _t95(df: int) -> float:
    """The quantile of the nearest tabled degrees of freedom at or below ``df`` (wider)."""
    if df > max(_T95):
        return 1.96
    return _T95[max(limit for limit in _T95 if limit <= max(df, 1))]
