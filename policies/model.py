"""The compiled policy: a frozen, typed model with no I/O and no knowledge of DNS or HTTP.

Durations are seconds (float), shares and thresholds are fractions (0.85 for 85%), rates are
requests per second. Every object carries the position of the directive it came from in
``pos``; positions are left out of equality so that a reformatted policy compares equal to
its source (``parse(fmt(p)) == parse(p)``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class SourcePos:
    """Where a directive starts: file name, 1-based line and column."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOWHERE = SourcePos("<policy>", 0, 0)


@dataclass(frozen=True)
class NameServer:
    name: str
    addresses: tuple[str, ...]
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Soa:
    mname: str
    rname: str
    serial: int | None  # None: derived from the policy's content hash at load
    refresh: float
    retry: float
    expire: float
    minimum: float
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Zone:
    apex: str  # lower case, no trailing dot
    ttl: float
    soa: Soa
    nameservers: tuple[NameServer, ...]
    admin_networks: tuple[str, ...]  # CIDRs allowed to ask _explain TXT queries
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Jurisdiction:
    """A named set of client locations (countries and continents), e.g. EU."""

    name: str
    countries: frozenset[str]
    continents: frozenset[str]
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class HealthCheck:
    name: str
    path: str
    expect: int
    interval: float
    timeout: float
    metrics_path: str | None
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Capacity:
    """Requests per second a region serves at 100%: ``rps``, or ``gpus`` x ``per_gpu_rps``."""

    rps: float
    gpus: int | None = None
    per_gpu_rps: float | None = None


@dataclass(frozen=True)
class GpuServer:
    name: str
    url: str
    models: tuple[str, ...]
    kind: str | None  # e.g. H100, A100
    speed: float | None  # relative speed hint; None: learned online
    engine: str  # vllm | sglang | tgi | triton
    # requests it runs at once, pinned by the operator; None: the balancer learns it
    max_seqs: int | None = None
    # where its KV-cache events are published (vLLM's --kv-events-config), and their replay
    kv_events: str | None = None
    kv_events_replay: str | None = None
    # the engine schedules by a request's "priority" (vLLM's --scheduling-policy priority)
    priority_scheduling: bool = False
    # the model's tokenizer: a directory with its tokenizer.json, "simulator" or "estimate"
    # (None: the estimate); the balancer reads it (regions.balancer.http.tokenizers)
    tokenizer: str | None = None
    # the revision it serves of a model: (model, revision), as the operator declares it
    revisions: tuple[tuple[str, str], ...] = ()
    # what its probe must read of a model (its /v1/models entry's root): (model, text)
    fingerprints: tuple[tuple[str, str], ...] = ()
    # LoRA adapters it holds loaded at once (its engine's --max-cpu-loras); None: as many
    # as its metrics say one batch may use (vLLM's max_lora, the --max-cpu-loras default)
    adapter_slots: int | None = None
    # a warm standby: asleep (vLLM's sleep mode) until its region's demand needs it; the
    # seconds a wake is expected to take (None: learned from its wakes, 10 s before)
    standby: bool = False
    wake_s: float | None = None
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter the region's balancer loads on its GPU servers of ``base`` when a
    request asks for it (``regions.balancer.adapters``)."""

    name: str
    base: str  # the model it adapts
    path: str  # what the engine loads it from (vLLM's lora_path)
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Region:
    name: str
    latitude: float
    longitude: float
    jurisdiction: str
    endpoints_v4: tuple[str, ...]
    endpoints_v6: tuple[str, ...]
    capacity: Capacity
    weight: float
    gpus: tuple[GpuServer, ...]
    healthcheck: str | None
    # a model's traffic over its revisions: (model, ((revision, percent), ...)), percents
    # adding to 100 (regions.balancer.scheduling.revision_split)
    splits: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    adapters: tuple[Adapter, ...] = ()
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


class AllDownKind(enum.Enum):
    ANSWER_ALLOWED = "answer-allowed"  # fail static inside the allowed set
    ANSWER_NOTHING = "answer-nothing"  # NODATA: fail closed
    FALLBACK = "fallback"  # answer the listed regions


@dataclass(frozen=True)
class AllDown:
    kind: AllDownKind
    regions: tuple[str, ...] = ()
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class ClientMatch:
    """Which clients a residency rule covers; a client matches if any set contains it."""

    jurisdictions: frozenset[str] = frozenset()
    countries: frozenset[str] = frozenset()
    continents: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ResidencyRule:
    name: str
    clients: ClientMatch
    allowed: tuple[str, ...]  # region names, in policy order
    all_down: AllDown
    spillover_to: tuple[str, ...] | None  # overrides the service's spill targets
    # allowed regions outside the clients' jurisdictions, acknowledged on purpose (lint)
    cross_border: tuple[str, ...] = ()
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Spillover:
    threshold: float  # utilization of capacity above which a region spills
    max_share: float  # at most this share of a region's clients moves
    targets: tuple[str, ...] | None  # None: the next allowed region in steering order
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Failover:
    fall: int
    rise: int
    interval: float
    timeout: float
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


class UnknownKind(enum.Enum):
    REGIONS = "regions"  # steer among the listed regions
    REFUSE = "refuse"  # answer nothing
    ANY = "any"  # steer among all regions of the service


@dataclass(frozen=True)
class UnknownLocation:
    kind: UnknownKind
    regions: tuple[str, ...] = ()
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


class PartialLocation(enum.Enum):
    """A client that residency rules may but do not surely hold (``policies.matching``)."""

    INTERSECT = "intersect"  # only where every rule it may fall under allows
    UNKNOWN = "unknown"  # as a client of unknown location


class NoEcs(enum.Enum):
    RESOLVER = "resolver"  # locate the resolver's address instead
    UNKNOWN = "unknown"  # treat the client as of unknown location


class Affinity(enum.Enum):
    NONE = "none"
    SUBNET = "subnet"  # a client network keeps its answer while inputs do not change


STEERING_METHODS = ("latency", "geo", "weighted", "priority")


class DegradeAction(enum.Enum):
    """What a step of a service's degradation ladder does with a request."""

    OVERFLOW = "overflow"  # the same model in a sibling region the client may use
    MODEL = "model"  # a declared lighter model, in this region
    CACHE = "cache"  # an exact-match cache hit
    SHED = "shed"  # 429 with a Retry-After that, honoured, is served


class DegradeTrigger(enum.Enum):
    """When a step is taken before the request is queued (without one: only once the
    region has shed the request, or has no server for it)."""

    QUEUE_WAIT = "queue-wait"  # the oldest queued request has waited this long (seconds)
    SATURATION = "saturation"  # requests in flight and queued over the region's slots
    ERROR_RATE = "error-rate"  # the region's share of errors over the last ten seconds


@dataclass(frozen=True)
class DegradeStep:
    action: DegradeAction
    model: str | None = None  # the lighter model (``model`` steps)
    trigger: DegradeTrigger | None = None
    threshold: float = 0.0  # seconds (queue-wait) or a fraction (saturation, error-rate)
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)

    def describe(self) -> str:
        what = f"model {self.model}" if self.model else self.action.value
        if self.trigger is None:
            return what
        value = (f"{self.threshold:g}s" if self.trigger is DegradeTrigger.QUEUE_WAIT
                 else f"{self.threshold * 100:g}%")
        return f"{what} when {self.trigger.value} {value}"


@dataclass(frozen=True)
class ResponseCache:
    """A service's exact-match response cache: deterministic requests only, per tenant,
    kept ``ttl`` seconds, at most ``max_bytes`` per region; ``tenants`` (empty: every
    tenant, or every client without identity) are those whose answers are cached."""

    ttl: float
    max_bytes: int = 64 * 1024 * 1024
    tenants: tuple[str, ...] = ()


# the upper bounds of the balancer's SLO latency histograms (seconds): an SLO's threshold
# must be one of them, so that its good events are one bucket's count, exactly
SLO_LATENCY_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
                       0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5,
                       10.0, 15.0, 20.0, 30.0, 60.0)


@dataclass(frozen=True)
class LatencyObjective:
    """``percentile``% of requests (0-100, exclusive) within ``threshold_s``."""

    percentile: float
    threshold_s: float

    @property
    def target(self) -> float:
        return self.percentile / 100.0


@dataclass(frozen=True)
class ServiceSlo:
    """A service's objectives over a rolling ``period_s``: ``availability`` (a fraction of
    requests answered without a server-side failure), ``ttft`` (time to first token) and
    ``itl`` (a request's mean time between tokens) percentiles; each for the service as a
    whole and for each of ``tenants`` on its own. None: no such objective."""

    availability: float | None = None
    ttft: LatencyObjective | None = None
    itl: LatencyObjective | None = None
    period_s: float = 30 * 86400.0
    tenants: tuple[str, ...] = ()
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Service:
    name: str  # fully qualified, lower case, no trailing dot
    regions: tuple[str, ...]  # regions that serve this service, policy order
    steer: tuple[str, ...]  # names from STEERING_METHODS, tried in order
    priority: tuple[str, ...]  # order for the 'priority' method
    ttl: float
    degraded_ttl: float  # TTL while a region on the answer path is degraded
    answers: int  # how many regions an answer carries (1 = the best only)
    spillover: Spillover | None
    failover: Failover
    residency: tuple[ResidencyRule, ...]
    all_down: AllDown  # for clients no residency rule covers
    unknown_location: UnknownLocation
    no_ecs: NoEcs
    affinity: Affinity
    healthcheck: str | None
    partial_location: PartialLocation | None = None  # None: intersect, not said (lint)
    # the models whose requests are this service's clients' (empty: every model); the
    # balancers re-check residency against every service serving the requested model
    models: tuple[str, ...] = ()
    cache: ResponseCache | None = None  # opt-in exact-match response cache
    degrade: tuple[DegradeStep, ...] = ()  # the degradation ladder, in order
    slo: ServiceSlo | None = None  # objectives: ``director slo rules`` makes alerts of them
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


class RedisDown(enum.Enum):
    """What a tenant's quota does while the shared state cannot be reached."""

    OPEN = "open"  # admit within the balancer's local limits
    CLOSED = "closed"  # refuse with 503 until the shared state is back


@dataclass(frozen=True)
class TenantQuota:
    """Limits enforced jointly by every balancer of the deployment (None: unlimited).

    Each rate is a token bucket refilled at ``*_per_minute`` and holding ``*_burst`` units:
    at most that many are admitted at once. The DSL sets the burst to the count as written
    (``10/s``: 10, ``600/min``: 600) unless the tenant declares one (``10/s burst 40``);
    None holds one minute's worth."""

    requests_per_minute: float | None = None
    input_tokens_per_minute: float | None = None
    output_tokens_per_minute: float | None = None
    concurrent: int | None = None
    requests_burst: float | None = None
    input_tokens_burst: float | None = None
    output_tokens_burst: float | None = None


@dataclass(frozen=True)
class Tenant:
    """Who sends requests: identified by API key or JWT at the regional balancer.

    ``weight``: its share in the region queue's fair queuing; ``priority``: its strict tier
    (higher first, with aging); ``services``/``models``: what it may use (empty: all);
    ``regions``: a residency override that may only narrow what the service allows (empty:
    none); ``reserve``: the share of a region's slots kept free for it while it has
    requests in flight (``regions/balancer/scheduling/fair_share.py``).
    """

    name: str
    weight: float = 1.0
    priority: int = 0
    quota: TenantQuota = field(default_factory=TenantQuota)
    services: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    redis_down: RedisDown = RedisDown.OPEN
    reserve: float = 0.0
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class JwtIdentity:
    """JWTs verified against a JWKS (a file path, or an https URL), with the claim naming the
    tenant; ``issuer`` and ``audience`` are checked when set. A file path is resolved against
    the folder of the policy file that names it, as ``include`` paths are."""

    jwks: str
    issuer: str | None = None
    audience: str | None = None
    tenant_claim: str = "tenant"
    leeway: float = 0.0  # seconds of clock skew allowed on exp/nbf/iat


@dataclass(frozen=True)
class Identity:
    """How the regional balancers identify tenants: API keys (kept hashed in the shared
    state, managed through the admin API) and/or JWTs. A policy without an ``identity``
    block identifies nobody and serves every request as today."""

    api_keys: bool = True
    jwt: JwtIdentity | None = None
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)


@dataclass(frozen=True)
class Policy:
    zone: Zone
    jurisdictions: tuple[Jurisdiction, ...]
    healthchecks: tuple[HealthCheck, ...]
    regions: tuple[Region, ...]
    services: tuple[Service, ...]
    stale_after: float  # state older than this is stale (fail-static bound)
    tenants: tuple[Tenant, ...] = ()
    identity: Identity | None = None  # None: requests are not identified
    pos: SourcePos = field(default=NOWHERE, compare=False, repr=False)

    def tenant(self, name: str) -> Tenant | None:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        return None

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    def service(self, name: str) -> Service:
        wanted = name.lower().rstrip(".")
        for service in self.services:
            if service.name == wanted:
                return service
        raise KeyError(name)

    def jurisdiction(self, name: str) -> Jurisdiction | None:
        for jurisdiction in self.jurisdictions:
            if jurisdiction.name == name:
                return jurisdiction
        return None

    def healthcheck(self, name: str) -> HealthCheck:
        for check in self.healthchecks:
            if check.name == name:
                return check
        raise KeyError(name)

    @property
    def region_names(self) -> tuple[str, ...]:
        return tuple(region.name for region in self.regions)
