# SPDX-License-Identifier: Apache-2.0
"""One backend: what it is (``BackendSpec``), its mutable runtime state (``Backend``, owned
by the pool) and a request's claim on it (``Lease``); how outliers are ejected
(``OutlierConfig``) and what its own metrics said (``ScrapedLoad``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.capacity import Capacity, CapacityEstimator
from regions.balancer.scheduling.error_rate import ErrorRate
from regions.balancer.scheduling.latency import ttft_ewma
from regions.balancer.scheduling.speed import Ewma


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
    tokenizer: str | None = None  # its model's tokenizer (``http.tokenizers``); None: estimate
    revisions: tuple[tuple[str, str], ...] = ()  # (model, revision) it serves, as declared
    adapter_slots: int | None = None  # LoRA adapters it holds at once, as declared
    standby: bool = False  # asleep until demand needs it (``signals.standby``)
    wake_s: float | None = None  # the wake it is expected to take (None: learned)

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

    def revision_of(self, model: str) -> str | None:
        """The revision of ``model`` it declares serving (None: undeclared)."""
        return next((r for m, r in self.revisions if m == model), None)

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
                   bool(getattr(obj, "priority_scheduling", False)),
                   getattr(obj, "tokenizer", None),
                   tuple(getattr(obj, "revisions", ())),
                   getattr(obj, "adapter_slots", None),
                   bool(getattr(obj, "standby", False)), getattr(obj, "wake_s", None))


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

    Errors eject a backend two ways: ``consecutive_errors`` in a row, or an error rate of
    ``error_rate`` or more over the last ten seconds once it has answered
    ``error_rate_min_requests`` there (a backend failing every other request never makes
    five in a row). Back from an error ejection it is half-open: on probation until its
    first success, and its first error there ejects it again at once, for twice as long.

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
    error_rate: float = 0.5  # share of errors over the window that ejects (0: never)
    error_rate_min_requests: int = 20


@dataclass(frozen=True, slots=True)
class ScrapedLoad:
    """What the GPU server's own metrics said (through the shared state); None: unknown."""

    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    kv_tokens: int | None = None  # KV capacity, where the metrics publish it


class LeaseHolder(Protocol):
    """What a lease tells the pool it was taken from."""

    def _started(self, lease: Lease) -> None: ...

    def _release(self, lease: Lease) -> None: ...


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
    on_probation: bool = False  # back from an error ejection, no success yet: half-open
    slow_start_from: float | None = None
    rate: Ewma = field(default_factory=Ewma)
    ttft: Ewma = field(default_factory=ttft_ewma)
    scraped: ScrapedLoad = field(default_factory=ScrapedLoad)
    requests: int = 0
    errors: int = 0
    error_rate: ErrorRate = field(default_factory=ErrorRate)
    models: frozenset[str] = field(init=False)
    capacity: CapacityEstimator = field(init=False)
    cap_now: Capacity = field(init=False)  # capacity.current() as of the last change
    spt: tuple[float, float] | None = None  # its FleetSpeed.line as of the last fit
    busy_integral: float = 0.0  # in_flight integrated over time (request-seconds)
    busy_at: float = 0.0  # when busy_integral was last brought up to date
    # models the version probe refuses it for, with why (workers.probes.versions): they
    # are left out of ``models``, so the model filter passes it by for them
    refused: tuple[tuple[str, str], ...] = ()
    # LoRA adapters it holds loaded (``adapters``): served like its models
    adapters: frozenset[str] = frozenset()
    waking: bool = False  # a standby server being woken: not serving yet (``standby``)

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
        pool: LeaseHolder,
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
