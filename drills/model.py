# SPDX-License-Identifier: Apache-2.0
"""The typed, frozen model of a drill file (what ``loader`` builds; no I/O here).

Times are seconds from the drill's t0, the moment the load generator starts. The load runs
through its ``phases`` back to back; faults start at ``start`` and last ``duration``; checks
are judged over the window their ``when`` names (see ``windows``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

API_VERSION = "drill/v1"
KIND = "Drill"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class When(enum.Enum):
    BEFORE = "before"          # requests issued before the first fault; judged at its start
    DURING = "during"          # requests issued while any fault is active
    AFTER = "after"            # requests issued after the last fault was restored
    CONTINUOUS = "continuous"  # every request, judged on every tick and at the end


class FaultType(enum.Enum):
    REGION_KILL = "region.kill"
    REGION_FREEZE = "region.freeze"
    REGION_DRAIN = "region.drain"
    GPU_ERRORS = "gpu.errors"
    GPU_SLOW = "gpu.slow"
    GPU_HANG = "gpu.hang"
    GPU_FAIL = "gpu.fail"
    GPU_KILL = "gpu.kill"
    GPU_DRAIN = "gpu.drain"
    GPU_SHORT = "gpu.short"
    GPU_STALL = "gpu.stall"  # a share of its streams goes silent mid-answer
    GPU_LATE = "gpu.late"  # a share of its streams sends the first token late
    GPU_SWAP = "gpu.swap"
    ROLLOUT_START = "rollout.start"
    REDIS_DOWN = "redis.down"
    WORKERS_KILL = "workers.kill"
    PROCESS_KILL = "process.kill"
    PROCESS_FREEZE = "process.freeze"
    TRAFFIC_SPIKE = "traffic.spike"
    TENANT_FLOOD = "tenant.flood"

    @property
    def target_kind(self) -> str | None:
        """What a fault of this type acts on: 'region', 'gpu', or None (no target)."""
        family = self.value.split(".")[0]
        return family if family in ("region", "gpu") else None

    @property
    def destructive(self) -> bool:
        """Requests in flight on the target when it starts may be cut or stalled."""
        return self in _DESTRUCTIVE

    @property
    def load_shape(self) -> bool:
        """A change of the offered load (made by the load generator), not an admin API
        call: nothing is injected or restored."""
        return self in _LOAD_SHAPE


_DESTRUCTIVE = frozenset({
    FaultType.REGION_KILL, FaultType.REGION_FREEZE, FaultType.GPU_HANG, FaultType.GPU_FAIL,
    FaultType.GPU_KILL,
})
_LOAD_SHAPE = frozenset({FaultType.TRAFFIC_SPIKE, FaultType.TENANT_FLOOD})


class CheckType(enum.Enum):
    RESIDENCY = "residency"
    LOST = "lost"
    SHED_RATIO = "shed_ratio"
    ERROR_RATIO = "error_ratio"
    TTFT = "ttft"
    FAILOVER_TIME = "failover_time"
    TRAFFIC_SHARE = "traffic_share"
    REGION_HEALTH = "region_health"
    COMPLETED = "completed"
    GOODPUT = "goodput"
    THROTTLED = "throttled"
    ROLLOUT = "rollout"


@dataclass(frozen=True)
class Tolerance:
    """Bounds a measured value must stay within (either may be absent)."""

    min: float | None = None
    max: float | None = None

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        if self.min is not None and value < self.min:
            return False
        return not (self.max is not None and value > self.max)

    def describe(self, unit: str = "") -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}{unit}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}{unit}")
        return " and ".join(parts) or "any"


@dataclass(frozen=True)
class Residency:
    """Where a residency cohort may be answered and served: regions, or jurisdictions."""

    regions: tuple[str, ...] = ()
    jurisdictions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cohort:
    name: str
    share: float
    countries: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()          # explicit client subnets (CIDR), used as given
    subnets_per_country: int = 2
    residency: Residency | None = None

    @property
    def resident(self) -> bool:
        return self.residency is not None


@dataclass(frozen=True)
class TenantShare:
    """A tenant of the running policy sending ``share`` of the load, with an API key the
    drill makes for it (through the admin API) and revokes at the end."""

    name: str
    share: float


@dataclass(frozen=True)
class Phase:
    name: str
    duration: float
    multiplier: float = 1.0       # of the baseline rate ("8x")
    rps: float | None = None      # or an absolute rate, requests per second
    ramp: float = 0.0             # seconds to move linearly from the previous rate


@dataclass(frozen=True)
class RateSource:
    rps: float
    arrivals: str = "poisson"     # poisson | uniform


@dataclass(frozen=True)
class TraceSource:
    path: str                     # absolute, after resolving against the drill file
    format: str                   # azure | mooncake
    offset: float = 0.0           # seconds into the trace to start from
    speedup: float = 1.0          # >1 compresses the trace's time


@dataclass(frozen=True)
class RequestSpec:
    model: str
    route: str = "/v1/chat/completions"
    max_tokens: int = 32
    prompt_tokens: int = 200      # for rate-driven load; a trace brings its own
    max_prompt_tokens: int = 8000 # caps trace prompts to what the servers accept


@dataclass(frozen=True)
class ClientSpec:
    connect_timeout: float = 2.0
    first_byte_timeout: float = 10.0
    stall_timeout: float = 10.0   # longest gap between two stream chunks
    total_timeout: float = 60.0
    retries: int = 2              # before any response byte, and on Retry-After
    backoff: float = 0.5          # first wait before a retry; doubles, +-25% jitter
    max_backoff: float = 8.0
    max_retry_after: float = 5.0
    max_in_flight: int = 256


@dataclass(frozen=True)
class DnsSpec:
    ecs: bool = True
    timeout: float = 2.0
    cache: str = "none"           # none: one query per attempt | ttl: honour answer TTLs
    max_ttl: float = 300.0


@dataclass(frozen=True)
class Load:
    service: str
    request: RequestSpec
    cohorts: tuple[Cohort, ...]
    phases: tuple[Phase, ...]
    rate: RateSource | None = None
    trace: TraceSource | None = None
    client: ClientSpec = field(default_factory=ClientSpec)
    dns: DnsSpec = field(default_factory=DnsSpec)
    geoip: str | None = None
    seed: int = 1
    max_requests: int = 20000
    tenants: tuple[TenantShare, ...] = ()  # empty: requests carry no credential

    @property
    def duration(self) -> float:
        return sum(p.duration for p in self.phases)

    def phase_start(self, name: str) -> float:
        t = 0.0
        for p in self.phases:
            if p.name == name:
                return t
            t += p.duration
        raise KeyError(name)


@dataclass(frozen=True)
class Target:
    name: str
    kind: str                              # region | gpu
    regions: tuple[str, ...] = ()          # names or fnmatch patterns; empty: all
    jurisdictions: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()             # fnmatch patterns for kind gpu; empty: all
    mode: str = "all"                      # all | count:N | percent:P
    on_empty: str = "fail"                 # fail | skip


@dataclass(frozen=True)
class Fault:
    id: str
    type: FaultType
    start: float
    duration: float
    target: str | None = None
    params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Check:
    name: str
    type: CheckType
    when: When
    expect: Tolerance = field(default_factory=Tolerance)
    cohorts: tuple[str, ...] = ()          # empty: every cohort (residency: resident ones)
    params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    tenants: tuple[str, ...] = ()          # empty: every tenant (and requests without one)

    @property
    def aborts(self) -> bool:
        """A residency violation ends the drill at once (the verdict stays ``failed``)."""
        return self.type is CheckType.RESIDENCY


@dataclass(frozen=True)
class Guard:
    """A stop condition: a metric over a sliding window, or a check, or a kill-switch file."""

    name: str
    type: str                              # a CheckType value, "check" or "kill_switch"
    expect: Tolerance = field(default_factory=Tolerance)
    window: float = 10.0
    cohorts: tuple[str, ...] = ()
    check: str | None = None
    file: str | None = None
    failure_threshold: int = 1
    params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class RestoreStep:
    type: str                              # region.undrain | gpu.undrain | process.restore
    target: str | None = None
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Restore:
    strategy: str = "always"               # always | never (dead-man ttl only)
    steps: tuple[RestoreStep, ...] = ()
    wait_healthy: float = 30.0             # after restoring, wait for every region healthy


@dataclass(frozen=True)
class BlastRadius:
    regions: tuple[str, ...] = ()          # empty: any region
    max_duration: float = 600.0            # dead-man cap for every fault's ttl


@dataclass(frozen=True)
class ReportSpec:
    formats: tuple[str, ...] = ("json", "html")
    drain: float = 15.0                    # after the load, wait this long for in-flight


@dataclass(frozen=True)
class Drill:
    name: str
    path: str
    load: Load
    title: str = ""
    hypothesis: str = ""
    tags: tuple[str, ...] = ()
    targets: Mapping[str, Target] = field(default_factory=lambda: _EMPTY)
    faults: tuple[Fault, ...] = ()
    checks: tuple[Check, ...] = ()
    guards: tuple[Guard, ...] = ()
    guard_every: float = 1.0
    restore: Restore = field(default_factory=Restore)
    blast_radius: BlastRadius = field(default_factory=BlastRadius)
    report: ReportSpec = field(default_factory=ReportSpec)
    ttl_margin: float = 15.0               # dead-man ttl = duration + margin (capped)

    @property
    def duration(self) -> float:
        return self.load.duration

    def cohort(self, name: str) -> Cohort:
        for c in self.load.cohorts:
            if c.name == name:
                return c
        raise KeyError(name)

    def fault(self, fault_id: str) -> Fault:
        for f in self.faults:
            if f.id == fault_id:
                return f
        raise KeyError(fault_id)

    @property
    def injected_faults(self) -> tuple[Fault, ...]:
        """Faults the runner injects through the admin API (not load shape changes)."""
        return tuple(f for f in self.faults if not f.type.load_shape)

    @property
    def tenant_names(self) -> tuple[str, ...]:
        """Every tenant the drill sends as (the load's, then the floods'), once each."""
        names = [t.name for t in self.load.tenants]
        names += [str(f.params["tenant"]) for f in self.faults
                  if f.type is FaultType.TENANT_FLOOD and "tenant" in f.params]
        return tuple(dict.fromkeys(names))

    def fault_ttl(self, fault: Fault) -> float:
        return min(self.blast_radius.max_duration, fault.duration + self.ttl_margin)
