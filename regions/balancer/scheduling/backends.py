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

Outlier ejection: after ``consecutive_errors`` errors in a row, or when its time to first
token is far above the region's (``record_ttft``, the rule in ``latency``, over the
requests bound while the backend was at most ``ttft_max_occupancy`` full), a backend is
ejected for ``base_ejection_s * 2**(k-1)`` (k = its ejection count, capped at
``max_ejection_s``), never more than ``max_ejected_fraction`` of the region at once (at
least one backend may be). When it returns, its effective cap ramps linearly from 1 to its
capacity over ``slow_start_s`` (slow start).

A TTFT ejection also forgets the backend's TTFT average, so it is judged again on fresh
samples only.

Capacity: each backend's ``CapacityEstimator`` (``capacity``) learns how many requests it
runs at once from scrapes (``set_scraped``) and its engine's limits (``set_engine_limits``),
unless the policy pins it; a view's ``cap`` is that capacity (a guess while unknown) and its
``limit`` what admission lets be in flight there: unbounded while the capacity of any
healthy backend of the region is unknown (``_limit``).

A TTFT sample does not invalidate anything: it arrives while its request holds a lease,
and the release rebuilds that backend's view, so it costs no extra rebuild. Scraped load
(``set_scraped``, about once a second from the shared state) rebuilds the backend's view
only when a value changed.

Drain: a backend is draining while any source holds a drain on it: ``"admin"`` (the
loopback admin endpoint, ``Balancer.drain``) or ``"state"`` (the flag an operator set in
the shared state, followed by ``shared_state.StateLink``). Undraining one source never
lifts the other's drain.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.capacity import (
    GUESS_SLOTS,
    Capacity,
    CapacityConfig,
    CapacityEstimator,
)
from regions.balancer.scheduling.latency import RegionTtft, is_ttft_outlier, ttft_ewma
from regions.balancer.scheduling.speed import BatchRate, Ewma
from regions.balancer.types import BackendSnapshot, RegionSnapshot

ADMIN = "admin"
_NO_SPT = (None, 0.0)  # spt_base, spt_slope of a backend whose speed model is not fitted
STATE = "state"


@dataclass(frozen=True)
class BackendSpec:
    """One GPU server behind the balancer. ``max_concurrency`` pins its capacity (the
    policy's ``max-seqs``; None: learned, see ``capacity``); ``engine`` says whose metric
    names and info endpoint it has (None: detected from its metrics page); ``kv_events``
    where it publishes its KV-cache events, if it does (``kv_event_follow``)."""

    name: str
    url: str
    models: tuple[str, ...]
    max_concurrency: int | None = None
    engine: str | None = None
    kv_events: str | None = None  # its KV-event publisher (vLLM's --kv-events-config endpoint)
    kv_events_replay: str | None = None  # and that publisher's replay endpoint
    priority_scheduling: bool = False  # send requests' priority (vLLM, scheduling priority)

    def __post_init__(self) -> None:
        if not self.name:
            raise BalancerConfigError("backend: name: must not be empty")
        if not self.url.startswith(("http://", "https://")):
            raise BalancerConfigError(
                f"backend {self.name}: url: expected http(s)://, got {self.url!r}"
            )
        if not self.models:
            raise BalancerConfigError(f"backend {self.name}: models: at least one is required")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise BalancerConfigError(f"backend {self.name}: max_concurrency: must be >= 1")
        for endpoint in (self.kv_events, self.kv_events_replay):
            if endpoint is not None and not endpoint.startswith(("tcp://", "ipc://")):
                raise BalancerConfigError(
                    f"backend {self.name}: kv_events: expected tcp:// or ipc://, got {endpoint!r}")

    @classmethod
    def coerce(cls, obj: Any, max_concurrency: int | None = None) -> BackendSpec:
        """Accept a ``BackendSpec`` or anything with ``name``, ``url``, ``models`` (such as
        ``policies.model.GpuServer``, whose ``max_seqs`` and ``engine`` are read; its
        ``speed`` hint is ignored: speeds are learned). ``max_concurrency`` pins every
        backend that does not pin its own."""
        if isinstance(obj, cls):
            return obj
        pinned = getattr(obj, "max_seqs", None) or max_concurrency
        return cls(str(obj.name), str(obj.url).rstrip("/"), tuple(obj.models), pinned,
                   getattr(obj, "engine", None), getattr(obj, "kv_events", None),
                   getattr(obj, "kv_events_replay", None),
                   bool(getattr(obj, "priority_scheduling", False)))


_MODEL_SETS: dict[frozenset[str], frozenset[str]] = {}


def model_set(models: Iterable[str]) -> frozenset[str]:
    """``frozenset(models)``, one object per distinct set (like ``sys.intern``): backends
    that serve the same models share it, so the ``model`` filter reads one set that stays
    in the CPU cache instead of one per backend (1,000 of them in a large region)."""
    models = frozenset(models)
    return _MODEL_SETS.setdefault(models, models)


@dataclass(frozen=True)
class OutlierConfig:
    """When a backend is ejected, for how long, and how it comes back (module docstring).

    TTFT ejection (opt-in: ``ttft_factor`` 0, the default, turns it off; 4 is a sensible
    setting): a backend with ``ttft_min_samples`` samples or more whose TTFT EWMA is above
    ``ttft_factor`` times the median of the others' and above ``ttft_floor_s``. Off by
    default because bursts trip it on healthy fleets: on the routing matrix a burst of long
    prompts (Azure code trace, whole-prompt prefill) gives one healthy server's first tokens
    several times its peers', it is ejected and returns through slow start while the region
    queue holds hundreds of requests (``balancer/README.md``). A fully hung server sends no
    first token at all, so it never showed here anyway; timeouts eject it as errors.

    Only requests bound while the backend ran at most ``ttft_max_occupancy`` of its cap are
    samples. A busy backend's first tokens wait for its running requests: for a slot, for
    KV cache, and for the prefills of everything admitted with them (a few 4k-token prompts
    on a slow GPU take a second). On the routing bench at 90% load, samples taken at any
    occupancy ejected healthy GPUs in 7 of 8 trace slices (up to 6 ejections in 120 s), and
    each cost the region a sixth of its capacity at its busiest. A sick backend still gets
    light-load samples: the learned speeds send it less work. The floor (1 s) is above
    what a healthy 0.4-speed GPU averages there (a 4k-token prompt alone prefills in 0.64 s
    on one; at a floor of 0.5 s such GPUs were still ejected in 3 of the 8 slices).
    """

    consecutive_errors: int = 5
    base_ejection_s: float = 5.0
    max_ejection_s: float = 60.0
    max_ejected_fraction: float = 0.5
    slow_start_s: float = 10.0
    ttft_factor: float = 0.0
    ttft_min_samples: int = 10
    ttft_floor_s: float = 1.0
    ttft_max_occupancy: float = 0.5


@dataclass(frozen=True, slots=True)
class ScrapedLoad:
    """What the GPU server's own metrics said (through the shared state); None: unknown."""

    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    kv_tokens: int | None = None  # KV capacity, where the metrics publish it


@dataclass
class Backend:
    """Mutable runtime state of one backend (owned by the pool; read via snapshots)."""

    spec: BackendSpec
    index: int
    in_flight: int = 0
    work_tokens: float = 0.0
    prefill_tokens: float = 0.0
    healthy: bool = True
    drains: set[str] = field(default_factory=set)
    consecutive_errors: int = 0
    ejections: int = 0
    ejected_until: float | None = None
    ejected_for: str | None = None
    slow_start_from: float | None = None
    rate: Ewma = field(default_factory=Ewma)
    ttft: Ewma = field(default_factory=ttft_ewma)
    scraped: ScrapedLoad = field(default_factory=ScrapedLoad)
    requests: int = 0
    errors: int = 0
    models: frozenset[str] = field(init=False)
    capacity: CapacityEstimator = field(init=False)
    cap_now: Capacity = field(init=False)  # capacity.current() as of the last change
    batch_rate: BatchRate = field(default_factory=BatchRate)
    spt: tuple[float, float] | None = None  # batch_rate.model() as of its last sample
    busy_integral: float = 0.0  # in_flight integrated over time (request-seconds)
    busy_at: float = 0.0  # when busy_integral was last brought up to date

    def __post_init__(self) -> None:
        self.models = model_set(self.spec.models)
        self.capacity = CapacityEstimator(self.spec.max_concurrency)
        self.cap_now = self.capacity.current(0.0)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def draining(self) -> bool:
        return bool(self.drains)


class Lease:
    """One request's claim on a backend; releases its accounting exactly once.

    ``occupancy``: the backend's requests in flight, this one included, over its configured
    ``max_concurrency`` (not the reduced cap of slow start) when it was bound (above 1: it
    waits at the server for a slot). ``record_ttft`` uses it to
    tell a busy backend's first tokens from a sick one's.

    ``prefill_tokens``: the prompt's cost (decode-token equivalents) counted in the
    backend's prefill backlog until ``started()`` (its first byte) or the release.
    """

    __slots__ = ("_pool", "backend", "cost_tokens", "decode_from", "occupancy",
                 "prefill_tokens", "released")

    def __init__(
        self,
        pool: BackendPool,
        backend: Backend,
        cost_tokens: float,
        occupancy: float = 0.0,
        prefill_tokens: float = 0.0,
    ) -> None:
        self._pool = pool
        self.backend = backend
        self.cost_tokens = cost_tokens
        self.occupancy = occupancy
        self.prefill_tokens = prefill_tokens
        self.released = False
        self.decode_from: tuple[float, float] | None = None  # (busy integral, time) at 1st byte

    def started(self) -> None:
        """The backend sent its first byte: the prompt is no longer waiting to prefill, and
        the stream's decode starts (its mean concurrency is measured from here)."""
        if self.decode_from is None and not self.released:
            self._pool._started(self)

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
        capacity: CapacityConfig | None = None,
    ) -> None:
        self.backends: list[Backend] = []
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
        if not self._eject(backend, self.clock(), "errors"):
            return False
        backend.consecutive_errors = 0
        return True

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

    def record_stream(self, lease: Lease, tokens_per_s: float) -> None:
        """A stream's decode rate, with the mean concurrency on its backend while it
        decoded (from its first byte until now): both feed the backend's learned speed."""
        b = lease.backend
        now = self.clock()
        _account(b, now)
        concurrency = float(max(1, b.in_flight))
        if lease.decode_from is not None:
            integral, since = lease.decode_from
            if now > since:
                concurrency = max(1.0, (b.busy_integral - integral) / (now - since))
        b.batch_rate.observe(concurrency, tokens_per_s)
        b.spt = b.batch_rate.model()
        self.record_rate(b, tokens_per_s)

    def record_rate(self, backend: Backend, tokens_per_s: float) -> None:
        """Fold a decode-rate sample in. While some backend has no rate yet, the fleet's
        prior (the mean learned rate) moves with it: every view is rebuilt."""
        first = backend.rate.value is None
        backend.rate.update(tokens_per_s)
        self.invalidate(None if first or self._unlearned else backend.index)

    def set_scraped(self, name: str, load: ScrapedLoad) -> None:
        """Backend ``name``'s load as last scraped (``ScrapedLoad()``: unknown or stale).
        A scrape with running and waiting is also a capacity observation."""
        b = self._lookup(name)
        if load.running is not None and load.waiting is not None:
            b.capacity.observe(self.clock(), load.running, load.waiting, load.kv_usage)
            self._capacity_changed(b)
        if load != b.scraped:
            b.scraped = load
            self.invalidate(b.index)

    def set_engine_limits(self, name: str, max_running: int | None,
                          max_in_flight: int | None) -> None:
        """What backend ``name``'s engine publishes about its limits (``engines.limits``)."""
        b = self._lookup(name)
        b.capacity.engine_limits(max_running, max_in_flight)
        self._capacity_changed(b)

    def forget_capacity(self, name: str) -> None:
        """Backend ``name`` may have restarted with other settings: learn its capacity anew."""
        b = self._lookup(name)
        b.capacity.forget()
        self._capacity_changed(b)

    def _capacity_changed(self, b: Backend) -> None:
        capacity = b.capacity.current(self.clock())
        if capacity == b.cap_now:
            return
        b.cap_now = capacity
        if self._region_capacity():
            self.changed()  # every view shows the new guess, or the region's new limits
        else:
            self.changed(b.index)  # a higher limit may let queued requests through

    def _region_capacity(self) -> bool:
        """Renew what the region's views share; True if it changed. ``_guess``: what scorers
        assume of a backend whose capacity is unknown, the largest learned in the region
        (its peers are likely alike), else ``GUESS_SLOTS``. ``_unsure``: with late binding,
        some healthy backend's capacity is unknown, without even a provisional limit (no
        scrape has shown it running); then no backend is full (``_limit``).
        Without late binding only pins hold, whatever the others know."""
        known = [b.cap_now.slots for b in self.backends if b.cap_now.slots is not None]
        guess = max(known) if known else GUESS_SLOTS
        unsure = self.capacity_config.late_binding and any(
            b.cap_now.slots is None and not b.cap_now.provisional
            for b in self.backends if b.healthy)
        changed = (guess, unsure) != (self._guess, self._unsure)
        self._guess, self._unsure = guess, unsure
        return changed

    def _limit(self, b: Backend, capacity: Capacity) -> int:
        """What admission lets be in flight at ``b``: its pinned limit, or its learned or
        provisional one (with ``late_binding``) once every healthy backend has one. Until then
        none but a pinned one is full (short of an engine's own in-flight limit): a region
        queue that holds requests for the known backends while an unknown one has "room"
        would send that one every request, hundreds deep in its engine's queue, where
        least-outstanding-requests would have shared them out."""
        if not self._unsure or capacity.source == "pinned":
            return capacity.limit
        return b.capacity.unheld_limit()

    def hold_at_capacity(self, on: bool, provisional: bool = False) -> None:
        """Hold requests in the region queue at learned capacities (``late_binding``), or
        stop; the tenants' fair share needs the queue (``tenancy``), and a provisional limit
        where a capacity is not learned yet (``CapacityConfig.provisional``)."""
        config = self.capacity_config
        if config.late_binding == on and config.provisional == provisional:
            return
        self.capacity_config = replace(config, late_binding=on, provisional=provisional)
        now = self.clock()
        for b in self.backends:
            b.capacity.config = self.capacity_config
            b.cap_now = b.capacity.current(now)
        self.changed()

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
