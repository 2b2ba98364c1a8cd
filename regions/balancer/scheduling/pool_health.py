# SPDX-License-Identifier: Apache-2.0
"""A pool's health from the data path (a mixin of ``backends.BackendPool``).

Outlier ejection: after ``consecutive_errors`` errors in a row, an error rate of
``error_rate`` over ten seconds (with ``error_rate_min_requests``), the first error
of a backend on probation (back from an error ejection without a success since: the
breaker's half-open state), or when its time to first
token is far above the region's (``record_ttft``, the rule in ``latency``, over the
requests bound while the backend was at most ``ttft_max_occupancy`` full), a backend is
ejected for ``base_ejection_s * 2**(k-1)`` (k = its ejection count, capped at
``max_ejection_s``), never more than ``max_ejected_fraction`` of the region at once (at
least one backend may be). When it returns, its effective cap ramps linearly from 1 to its
capacity over ``slow_start_s`` (slow start).

A TTFT ejection also forgets the backend's TTFT average, so it is judged again on fresh
samples only.

Drain: a backend is draining while any source holds a drain on it: ``"admin"`` (the
loopback admin endpoint, ``Balancer.drain``) or ``"state"`` (the flag an operator set in
the shared state, followed by ``shared_state.StateLink``). Undraining one source never
lifts the other's drain.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from regions.balancer.scheduling.backend import Backend, OutlierConfig, model_set
from regions.balancer.scheduling.latency import RegionTtft, is_ttft_outlier, ttft_ewma

ADMIN = "admin"  # a drain's source: the loopback admin endpoint (``Balancer.drain``)


class PoolHealth:
    """Ejection, drains and health of ``BackendPool`` (a mixin of it)."""

    outliers: OutlierConfig
    _region_ttft: RegionTtft

    backends: list[Backend]
    by_name: dict[str, Backend]
    clock: Callable[[], float]

    if TYPE_CHECKING:  # BackendPool's, for the type checker only (never shadow it)
        def changed(self, index: int | None = None) -> None: ...

        def invalidate(self, index: int | None = None) -> None: ...

        def _lookup(self, name: str) -> Backend: ...

        def _region_capacity(self) -> bool: ...

    def record_success(self, backend: Backend) -> None:
        backend.consecutive_errors = 0
        backend.on_probation = False
        if self.outliers.error_rate > 0:
            backend.error_rate.add(self.clock(), False)

    def record_failure(self, backend: Backend) -> bool:
        """Count an error; eject the backend when it makes too many in a row, too high a
        rate, or is the first on probation. True if ejected."""
        backend.errors += 1
        backend.consecutive_errors += 1
        cfg, now = self.outliers, self.clock()
        if cfg.error_rate > 0:
            backend.error_rate.add(now, True)
        if backend.ejected_until is not None and now < backend.ejected_until:
            return False  # a request sent before it was ejected
        if not (backend.on_probation or backend.consecutive_errors >= cfg.consecutive_errors
                or self._error_rate_high(backend, now)):
            return False
        if not self._eject(backend, now, "errors"):
            return False
        backend.consecutive_errors = 0
        backend.error_rate.reset()
        backend.on_probation = True
        return True

    def _error_rate_high(self, backend: Backend, now: float) -> bool:
        cfg = self.outliers
        if cfg.error_rate <= 0:
            return False
        errors, total = backend.error_rate.counts(now)
        return total >= cfg.error_rate_min_requests and errors >= cfg.error_rate * total

    def record_ttft(self, backend: Backend, seconds: float, occupancy: float = 0.0) -> bool:
        """Fold a time-to-first-token sample in; eject the backend if that makes it a TTFT
        outlier (see ``latency``). True if ejected.

        ``occupancy`` is the request's ``Lease.occupancy``: samples from a backend busier
        than ``ttft_max_occupancy`` when the request was bound are ignored (they measure
        its load), as are samples arriving while it is ejected (requests sent before). The
        view is not invalidated: the next rebuild picks the new average up."""
        cfg = self.outliers
        now = self.clock()
        if occupancy > cfg.ttft_max_occupancy:
            return False
        if backend.ejected_until is not None and now < backend.ejected_until:
            return False
        ewma = backend.ttft.update(seconds)
        if (
            cfg.ttft_factor <= 0
            or ewma <= cfg.ttft_floor_s
            or backend.ttft.samples < cfg.ttft_min_samples
        ):
            return False
        region = self._region_ttft
        if region.stale(now):
            region.rebuild(
                {
                    b.name: b.ttft.value
                    for b in self.backends
                    if b.ttft.value is not None and b.ttft.samples >= cfg.ttft_min_samples
                },
                now,
            )
        baseline = region.median_without(backend.name)
        if not is_ttft_outlier(ewma, baseline, cfg.ttft_factor, cfg.ttft_floor_s):
            return False
        if not self._eject(backend, now, "ttft"):
            return False
        backend.ttft = ttft_ewma()
        region.invalidate()
        return True

    def _eject(self, backend: Backend, now: float, reason: str) -> bool:
        """Eject ``backend`` unless it already is or the region's ejection budget is spent."""
        cfg = self.outliers
        if backend.ejected_until is not None and now < backend.ejected_until:
            return False
        ejected = sum(1 for b in self.backends if b.ejected_until and now < b.ejected_until)
        allowed = max(1, math.floor(cfg.max_ejected_fraction * len(self.backends)))
        if ejected >= allowed:
            return False
        backend.ejections += 1
        duration = min(cfg.max_ejection_s, cfg.base_ejection_s * 2 ** (backend.ejections - 1))
        backend.ejected_until = now + duration
        backend.ejected_for = reason
        backend.slow_start_from = None
        if reason == "errors":  # failing: it may be restarting with other settings
            backend.capacity.forget()
            backend.cap_now = backend.capacity.current(now)
            self._region_capacity()
        self.changed()
        return True

    def set_draining(self, name: str, draining: bool, source: str = ADMIN) -> None:
        """Hold (or lift) ``source``'s drain on backend ``name``."""
        drains = self._lookup(name).drains
        before = bool(drains)
        if draining:
            drains.add(source)
        else:
            drains.discard(source)
        if bool(drains) != before:
            self.changed()

    def set_refused(self, name: str, refused: Mapping[str, str]) -> bool:
        """The models ``name`` is refused for (the version probe's verdict), with why;
        True if that changed. It keeps serving its other models."""
        b = self._lookup(name)
        pairs = tuple(sorted((m, why) for m, why in refused.items() if m in b.spec.models))
        if pairs == b.refused:
            return False
        b.refused = pairs
        self._set_models(b)
        return True

    def set_adapters(self, name: str, adapters: Iterable[str]) -> bool:
        """The LoRA adapters ``name`` holds loaded now (``adapters``): it serves them as
        models; True if that changed."""
        b = self._lookup(name)
        held = frozenset(adapters)
        if held == b.adapters:
            return False
        b.adapters = held
        self._set_models(b)
        return True

    def _set_models(self, b: Backend) -> None:
        refused = dict(b.refused)
        b.models = model_set([*(m for m in b.spec.models if m not in refused), *b.adapters])
        self.changed(b.index)

    def set_healthy(self, name: str, healthy: bool) -> None:
        b = self._lookup(name)
        if healthy == b.healthy:
            return
        if healthy:
            b.slow_start_from = self.clock()
        else:
            b.capacity.forget()  # it may come back with other settings
            b.cap_now = b.capacity.current(self.clock())
        b.healthy = healthy
        self._region_capacity()
        self.changed()
