# SPDX-License-Identifier: Apache-2.0
"""Backends of one region: their specs, their mutable runtime state, and the pool that
turns that state into frozen ``RegionSnapshot`` values for the pipeline.

State changes (a lease taken or released, an error, a drain, a learned rate) invalidate
the cached snapshot; the next ``snapshot()`` rebuilds it. A lease or a learned rate touches
one backend, so only that backend's view is rebuilt (the others are reused: a pick costs
the same with 6 backends or 1,000); anything else rebuilds every view. Time-driven changes
(end of an ejection, slow-start ramp) are honoured by the snapshot's ``valid_until``.

In-flight accounting: ``lease()`` increments a backend's count and predicted work; the
returned ``Lease`` decrements them exactly once, from ``release()`` or its ``with`` exit,
however the request ends.

Ejection, drains and health: ``pool_health``; capacities and the limit admission holds
each backend at: ``pool_capacity``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.backend import (
    Backend,
    BackendSpec,
    Lease,
    OutlierConfig,
)
from regions.balancer.scheduling.capacity import (
    GUESS_SLOTS,
    CapacityConfig,
    CapacityEstimator,
)
from regions.balancer.scheduling.fleet_speed import FleetSpeed
from regions.balancer.scheduling.latency import RegionTtft
from regions.balancer.scheduling.pool_capacity import PoolCapacity
from regions.balancer.scheduling.pool_health import PoolHealth
from regions.balancer.types import BackendSnapshot, RegionSnapshot

_NO_SPT = (None, 0.0)  # spt_base, spt_slope of a backend whose speed model is not fitted
STATE = "state"


class BackendPool(PoolHealth, PoolCapacity):
    """The region's backends and their snapshot."""

    def __init__(
        self,
        specs: Iterable[BackendSpec],
        *,
        outliers: OutlierConfig | None = None,
        default_tokens_per_s: float = 50.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] | None = None,
        capacity: CapacityConfig | None = None,
    ) -> None:
        self.backends: list[Backend] = []
        self.membership = 0  # counts joins and removals (``signals.pool_update``)
        names: set[str] = set()
        for i, spec in enumerate(specs):
            if spec.name in names:
                raise BalancerConfigError(f"backend {spec.name}: duplicate name")
            names.add(spec.name)
            self.backends.append(Backend(spec, i))
        if not self.backends:
            raise BalancerConfigError("backends: at least one backend is required")
        self.by_name = {b.name: b for b in self.backends}
        self.outliers = outliers or OutlierConfig()
        self.default_tokens_per_s = default_tokens_per_s
        self.clock = clock
        self.on_change = on_change
        self.capacity_config = capacity or CapacityConfig()
        for b in self.backends:
            b.capacity = CapacityEstimator(b.spec.max_concurrency, self.capacity_config)
            b.cap_now = b.capacity.current(clock())
        self._guess = GUESS_SLOTS
        self._unsure = True
        self._region_capacity()
        self._snapshot: RegionSnapshot | None = None
        self._views: list[BackendSnapshot] | None = None  # None: rebuild every view
        self._touched: set[int] = set()
        self._unlearned = len(self.backends)
        self._valid_until = math.inf
        self._version = 0
        self._region_ttft = RegionTtft()
        self.speeds = FleetSpeed()  # every backend's time per token on one fleet shape

    def __iter__(self) -> Iterator[Backend]:
        return iter(self.backends)

    def __getitem__(self, name: str) -> Backend:
        return self.by_name[name]

    # -- snapshot ------------------------------------------------------------------------

    def invalidate(self, index: int | None = None) -> None:
        """Drop the cached snapshot: only backend ``index``'s view, or every view."""
        self._snapshot = None
        if index is None:
            self._views = None
        else:
            self._touched.add(index)

    def changed(self, index: int | None = None) -> None:
        """Invalidate and tell the owner (the dispatcher pumps its queue)."""
        self.invalidate(index)
        if self.on_change is not None:
            self.on_change()

    def prior_tokens_per_s(self) -> float:
        learned = [b.rate.value for b in self.backends if b.rate.value is not None]
        return sum(learned) / len(learned) if learned else self.default_tokens_per_s

    def snapshot(self) -> RegionSnapshot:
        now = self.clock()
        if self._snapshot is not None and now < self._valid_until:
            return self._snapshot
        self._version += 1
        views = self._views
        if views is not None and now < self._valid_until:
            backends, guess = self.backends, self._guess
            for i in self._touched:
                b = backends[i]
                rate = b.rate.value
                if rate is None or b.ejected_until is not None or b.slow_start_from is not None:
                    views = None  # a view that depends on time or on the fleet's prior rate
                    break
                # what _view builds for a steady backend (not ejected, no slow start, a
                # learned rate), inlined: one is built on every lease and release
                ttft, scraped, capacity = b.ttft, b.scraped, b.cap_now
                spt_base, spt_slope = b.spt or _NO_SPT
                cap = guess if capacity.slots is None else capacity.slots
                prefetch = self._limit(b, capacity) - cap
                views[i] = BackendSnapshot(
                    b.index,
                    b.spec.name,
                    b.models,
                    b.healthy,
                    False,  # ejected
                    bool(b.drains),  # draining
                    b.in_flight,
                    cap,
                    b.work_tokens,
                    rate,  # tokens_per_s
                    True,  # rate_learned
                    prefetch,
                    ttft.value,  # ttft_ewma_s
                    ttft.samples,
                    scraped.waiting,
                    scraped.running,
                    scraped.kv_usage,
                    b.prefill_tokens,
                    capacity.slots is not None,  # cap_known
                    spt_base,
                    spt_slope,
                    scraped.kv_tokens,
                    b.spec.revisions,
                    b.refused,
                )
        if views is None or now >= self._valid_until:
            views = self._rebuild_all(now)
        self._touched.clear()
        self._snapshot = RegionSnapshot(views, self._version)  # shared, see RegionSnapshot
        return self._snapshot

    def _rebuild_all(self, now: float) -> list[BackendSnapshot]:
        prior = self.prior_tokens_per_s()
        valid_until = math.inf
        views = []
        for b in self.backends:
            view, until = self._view(b, now, prior)
            views.append(view)
            valid_until = min(valid_until, until)
        self._views = views
        self._valid_until = valid_until
        self._unlearned = sum(1 for b in self.backends if b.rate.value is None)
        return views

    def _view(self, b: Backend, now: float, prior: float) -> tuple[BackendSnapshot, float]:
        """One backend's view, and until when it holds (ejection, slow start)."""
        valid_until = math.inf
        ejected = b.ejected_until is not None and now < b.ejected_until
        if ejected:
            valid_until = b.ejected_until or math.inf
        elif b.ejected_until is not None:  # ejection over: start the ramp
            b.ejected_until = None
            b.slow_start_from = b.slow_start_from or now
        capacity = b.cap_now
        cap = self._guess if capacity.slots is None else capacity.slots
        prefetch = self._limit(b, capacity) - cap
        ramp = self.outliers.slow_start_s
        if b.slow_start_from is not None:
            elapsed = now - b.slow_start_from
            if ramp <= 0 or elapsed >= ramp:
                b.slow_start_from = None
            else:
                cap = max(1, math.ceil(cap * elapsed / ramp))
                prefetch = 0  # a returning backend ramps carefully
                valid_until = min(valid_until, now + ramp / 16)
        rate, ttft, scraped = b.rate.value, b.ttft, b.scraped
        spt_base, spt_slope = b.spt or _NO_SPT
        # positional, in field order: keyword arguments cost three times as much, and a view
        # is built on every lease and release
        view = BackendSnapshot(
            b.index,
            b.spec.name,
            b.models,
            b.healthy,
            ejected,
            bool(b.drains),  # draining
            b.in_flight,
            cap,
            b.work_tokens,
            prior if rate is None else rate,  # tokens_per_s
            rate is not None,  # rate_learned
            prefetch,
            ttft.value,  # ttft_ewma_s
            ttft.samples,
            scraped.waiting,
            scraped.running,
            scraped.kv_usage,
            b.prefill_tokens,
            capacity.slots is not None,  # cap_known
            spt_base,
            spt_slope,
            scraped.kv_tokens,
            b.spec.revisions,
            b.refused,
        )
        return view, valid_until

    def next_transition(self) -> float:
        """Clock time at which the current snapshot expires (inf if never)."""
        self.snapshot()
        return self._valid_until

    # -- accounting ----------------------------------------------------------------------

    def lease(self, index: int, cost_tokens: float, prefill_tokens: float = 0.0) -> Lease:
        """Count a request on backend ``index``: ``cost_tokens`` of work, of which
        ``prefill_tokens`` (its prompt) wait to prefill until ``Lease.started()``."""
        b = self.backends[index]
        _account(b, self.clock())
        b.in_flight += 1
        b.work_tokens += cost_tokens
        b.prefill_tokens += prefill_tokens
        b.requests += 1
        self._snapshot = None  # invalidate(index), inlined: every bind takes a lease
        self._touched.add(index)
        slots = b.cap_now.slots or self._guess
        return Lease(self, b, cost_tokens, b.in_flight / slots, prefill_tokens)

    def _started(self, lease: Lease) -> None:
        b = lease.backend
        now = self.clock()
        _account(b, now)
        lease.decode_from = (b.busy_integral, now)
        if lease.prefill_tokens:
            _drop_prefill(b, lease)
            self._snapshot = None  # no slot was freed: nothing for the queue to do
            self._touched.add(b.index)

    def _release(self, lease: Lease) -> None:
        b = lease.backend
        _account(b, self.clock())
        b.in_flight -= 1
        b.work_tokens -= lease.cost_tokens
        _drop_prefill(b, lease)
        if b.in_flight == 0:
            b.work_tokens = 0.0  # no float drift
        self.changed(b.index)

    def in_flight(self) -> int:
        return sum(b.in_flight for b in self.backends)

    def record_stream(self, lease: Lease, tokens_per_s: float,
                      step_seconds: float | None = None) -> None:
        """A stream's decode rate and median time per token (``StreamMeter``), with the
        mean concurrency on its backend while it decoded (from its first byte until now):
        the median (else the rate's inverse) and the concurrency feed the fleet's speeds
        (``FleetSpeed``, refitted at most once a second), the rate the backend's own."""
        b = lease.backend
        now = self.clock()
        _account(b, now)
        concurrency = float(max(1, b.in_flight))
        if lease.decode_from is not None:
            integral, since = lease.decode_from
            if now > since:
                concurrency = max(1.0, (b.busy_integral - integral) / (now - since))
        slots = b.cap_now.slots  # the engine decodes that many at most; the rest wait
        batch = min(concurrency, slots) if slots else concurrency
        self.speeds.observe(b.name, batch, step_seconds or 1.0 / tokens_per_s)
        if self.speeds.refit(now):  # every backend's line moves with the shape
            for other in self.backends:
                other.spt = self.speeds.line(other.name)
            self.invalidate()
        self.record_rate(b, tokens_per_s)

    def record_rate(self, backend: Backend, tokens_per_s: float) -> None:
        """Fold a decode-rate sample in. While some backend has no rate yet, the fleet's
        prior (the mean learned rate) moves with it: every view is rebuilt."""
        first = backend.rate.value is None
        backend.rate.update(tokens_per_s)
        self.invalidate(None if first or self._unlearned else backend.index)

    def _lookup(self, name: str) -> Backend:
        try:
            return self.by_name[name]
        except KeyError:
            raise BalancerConfigError(f"backend {name!r}: no such backend") from None


def _account(backend: Backend, now: float) -> None:
    """Bring the backend's in-flight integral up to ``now`` (before in_flight changes)."""
    backend.busy_integral += backend.in_flight * (now - backend.busy_at)
    backend.busy_at = now


def _drop_prefill(backend: Backend, lease: Lease) -> None:
    """Take ``lease``'s prompt out of ``backend``'s prefill backlog (once)."""
    backend.prefill_tokens -= lease.prefill_tokens
    lease.prefill_tokens = 0.0
    if backend.prefill_tokens < 1e-9:
        backend.prefill_tokens = 0.0  # no float drift
