# SPDX-License-Identifier: Apache-2.0
"""Backends of one region: their specs, their mutable runtime state, and the pool that
turns that state into frozen ``RegionSnapshot`` values for the pipeline.

State changes (a lease taken or released, an error, a drain, a learned rate) invalidate
the cached snapshot; the next ``snapshot()`` rebuilds it. Time-driven changes (end of an
ejection, slow-start ramp) are honoured by the snapshot's ``valid_until``.

In-flight accounting: ``lease()`` increments a backend's count and predicted work; the
returned ``Lease`` decrements them exactly once, from ``release()`` or its ``with`` exit,
however the request ends.

Outlier ejection: after ``consecutive_errors`` errors in a row a backend is ejected for
``base_ejection_s * 2**(k-1)`` (k = its ejection count, capped at ``max_ejection_s``),
never more than ``max_ejected_fraction`` of the region at once (at least one backend may
be). When it returns, its effective cap ramps linearly from 1 to its cap over
``slow_start_s`` (slow start).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from regions.balancer.errors import BalancerConfigError
from regions.balancer.speed import Ewma
from regions.balancer.types import BackendSnapshot, RegionSnapshot


@dataclass(frozen=True)
class BackendSpec:
    """One GPU server behind the balancer. ``max_concurrency`` is its admission cap."""

    name: str
    url: str
    models: tuple[str, ...]
    max_concurrency: int = 16

    def __post_init__(self) -> None:
        if not self.name:
            raise BalancerConfigError("backend: name: must not be empty")
        if not self.url.startswith(("http://", "https://")):
            raise BalancerConfigError(
                f"backend {self.name}: url: expected http(s)://, got {self.url!r}"
            )
        if not self.models:
            raise BalancerConfigError(f"backend {self.name}: models: at least one is required")
        if self.max_concurrency < 1:
            raise BalancerConfigError(f"backend {self.name}: max_concurrency: must be >= 1")

    @classmethod
    def coerce(cls, obj: Any, max_concurrency: int = 16) -> BackendSpec:
        """Accept a ``BackendSpec`` or anything with ``name``, ``url``, ``models`` (such as
        ``policies.model.GpuServer``; its ``speed`` hint is ignored: speeds are learned)."""
        if isinstance(obj, cls):
            return obj
        return cls(str(obj.name), str(obj.url).rstrip("/"), tuple(obj.models), max_concurrency)


@dataclass(frozen=True)
class OutlierConfig:
    consecutive_errors: int = 5
    base_ejection_s: float = 5.0
    max_ejection_s: float = 60.0
    max_ejected_fraction: float = 0.5
    slow_start_s: float = 10.0


@dataclass
class Backend:
    """Mutable runtime state of one backend (owned by the pool; read via snapshots)."""

    spec: BackendSpec
    index: int
    in_flight: int = 0
    work_tokens: float = 0.0
    healthy: bool = True
    draining: bool = False
    consecutive_errors: int = 0
    ejections: int = 0
    ejected_until: float | None = None
    slow_start_from: float | None = None
    rate: Ewma = field(default_factory=Ewma)
    requests: int = 0
    errors: int = 0

    @property
    def name(self) -> str:
        return self.spec.name


class Lease:
    """One request's claim on a backend; releases its accounting exactly once."""

    __slots__ = ("_pool", "backend", "cost_tokens", "released")

    def __init__(self, pool: BackendPool, backend: Backend, cost_tokens: float) -> None:
        self._pool = pool
        self.backend = backend
        self.cost_tokens = cost_tokens
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._pool._release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class BackendPool:
    """The region's backends and their snapshot."""

    def __init__(
        self,
        specs: Iterable[BackendSpec],
        *,
        outliers: OutlierConfig | None = None,
        default_tokens_per_s: float = 50.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.backends: list[Backend] = []
        for i, spec in enumerate(specs):
            if any(b.name == spec.name for b in self.backends):
                raise BalancerConfigError(f"backend {spec.name}: duplicate name")
            self.backends.append(Backend(spec, i))
        if not self.backends:
            raise BalancerConfigError("backends: at least one backend is required")
        self.by_name = {b.name: b for b in self.backends}
        self.outliers = outliers or OutlierConfig()
        self.default_tokens_per_s = default_tokens_per_s
        self.clock = clock
        self.on_change = on_change
        self._snapshot: RegionSnapshot | None = None
        self._valid_until = math.inf
        self._version = 0

    def __iter__(self) -> Iterator[Backend]:
        return iter(self.backends)

    def __getitem__(self, name: str) -> Backend:
        return self.by_name[name]

    # -- snapshot ------------------------------------------------------------------------

    def invalidate(self) -> None:
        self._snapshot = None

    def changed(self) -> None:
        """Invalidate and tell the owner (the dispatcher pumps its queue)."""
        self._snapshot = None
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
        prior = self.prior_tokens_per_s()
        valid_until = math.inf
        views = []
        ramp = self.outliers.slow_start_s
        for b in self.backends:
            ejected = b.ejected_until is not None and now < b.ejected_until
            if ejected:
                valid_until = min(valid_until, b.ejected_until or math.inf)
            elif b.ejected_until is not None:  # ejection over: start the ramp
                b.ejected_until = None
                b.slow_start_from = b.slow_start_from or now
            cap = b.spec.max_concurrency
            if b.slow_start_from is not None:
                elapsed = now - b.slow_start_from
                if ramp <= 0 or elapsed >= ramp:
                    b.slow_start_from = None
                else:
                    cap = max(1, math.ceil(cap * elapsed / ramp))
                    valid_until = min(valid_until, now + ramp / 16)
            views.append(
                BackendSnapshot(
                    index=b.index,
                    name=b.name,
                    models=frozenset(b.spec.models),
                    healthy=b.healthy,
                    ejected=ejected,
                    draining=b.draining,
                    in_flight=b.in_flight,
                    cap=cap,
                    work_tokens=b.work_tokens,
                    tokens_per_s=b.rate.value if b.rate.value is not None else prior,
                    rate_learned=b.rate.value is not None,
                )
            )
        self._snapshot = RegionSnapshot(tuple(views), self._version)
        self._valid_until = valid_until
        return self._snapshot

    def next_transition(self) -> float:
        """Clock time at which the current snapshot expires (inf if never)."""
        self.snapshot()
        return self._valid_until

    # -- accounting ----------------------------------------------------------------------

    def lease(self, index: int, cost_tokens: float) -> Lease:
        b = self.backends[index]
        b.in_flight += 1
        b.work_tokens += cost_tokens
        b.requests += 1
        self._snapshot = None
        return Lease(self, b, cost_tokens)

    def _release(self, lease: Lease) -> None:
        b = lease.backend
        b.in_flight -= 1
        b.work_tokens -= lease.cost_tokens
        if b.in_flight == 0:
            b.work_tokens = 0.0  # no float drift
        self.changed()

    def in_flight(self) -> int:
        return sum(b.in_flight for b in self.backends)

    # -- data-path health ----------------------------------------------------------------

    def record_success(self, backend: Backend) -> None:
        backend.consecutive_errors = 0

    def record_failure(self, backend: Backend) -> bool:
        """Count an error; eject the backend when the threshold is reached. True if ejected."""
        backend.errors += 1
        backend.consecutive_errors += 1
        cfg = self.outliers
        if backend.consecutive_errors < cfg.consecutive_errors:
            return False
        now = self.clock()
        if backend.ejected_until is not None and now < backend.ejected_until:
            return False
        ejected = sum(1 for b in self.backends if b.ejected_until and now < b.ejected_until)
        allowed = max(1, math.floor(cfg.max_ejected_fraction * len(self.backends)))
        if ejected >= allowed:
            return False
        backend.ejections += 1
        duration = min(cfg.max_ejection_s, cfg.base_ejection_s * 2 ** (backend.ejections - 1))
        backend.ejected_until = now + duration
        backend.slow_start_from = None
        backend.consecutive_errors = 0
        self.changed()
        return True

    def record_rate(self, backend: Backend, tokens_per_s: float) -> None:
        backend.rate.update(tokens_per_s)
        self.invalidate()

    def set_draining(self, name: str, draining: bool) -> None:
        self._lookup(name).draining = draining
        self.changed()

    def set_healthy(self, name: str, healthy: bool) -> None:
        b = self._lookup(name)
        if healthy and not b.healthy:
            b.slow_start_from = self.clock()
        b.healthy = healthy
        self.changed()

    def _lookup(self, name: str) -> Backend:
        try:
            return self.by_name[name]
        except KeyError:
            raise BalancerConfigError(f"backend {name!r}: no such backend") from None
