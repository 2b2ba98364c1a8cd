# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics of one balancer, on its own registry (no process-wide state).

- ``director_balancer_in_flight{backend}``, ``director_balancer_work_tokens{backend}``,
  ``director_balancer_prefill_tokens{backend}`` (prompts sent there without a first byte
  yet), ``director_balancer_tokens_per_second{backend}`` (learned), ``director_balancer_queue``,
  ``director_balancer_capacity{backend,source}`` (learned or pinned, absent while unknown),
  ``director_balancer_capacity_limit{backend}``, ``director_balancer_tenant_in_flight{tenant}``:
  gauges read from the pool and the region queue at scrape time;
- ``director_balancer_decisions_total{backend}``, ``director_balancer_retries_total``,
  ``director_balancer_stream_resumes_total{outcome,reason}`` (streams silent mid-answer,
  ``upstream_errors_total{kind="stall"}`` by backend),
  ``director_balancer_hedges_total{outcome}`` (late first bytes, ``http.hedging``),
  ``director_balancer_cache_total{outcome}``, ``director_balancer_cache_hit_seconds``
  (the exact-match cache, ``degrade.cache_stage``), ``director_balancer_degraded_total{step}``
  (``degrade.ladder``),
  ``director_balancer_ejections_total{backend}``, ``director_balancer_shed_total{reason}``,
  ``director_balancer_upstream_errors_total{backend,kind}``,
  ``director_balancer_client_gone_total{when}`` (``before_end``, ``at_end``: after the last
  chunk, as SSE clients do once they read ``[DONE]``),
  ``director_balancer_stalled_clients_total`` (clients cut for taking no byte of their
  answer for the stall deadline: their GPU slot and quota freed),
  ``director_balancer_slow_requests_total{phase}`` (connections cut for sending their
  ``headers`` or their ``body`` too slowly);
- ``director_balancer_ttft_seconds{backend}``, ``director_balancer_e2e_seconds{backend}``
  (a sampled request's trace id as the bucket's exemplar, in the OpenMetrics exposition);
- ``director_balancer_slo_requests_total{model,tenant,outcome}``,
  ``director_balancer_slo_ttft_seconds{model,tenant}``,
  ``director_balancer_slo_itl_seconds{model,tenant}``: what service level objectives are
  computed from (``http.sli``, ``director slo rules``);
- ``director_balancer_state_reachable`` (1/0, shared state server),
  ``director_balancer_state_errors_total{op}`` (``publish``, ``read``, ``listen``);
- ``director_balancer_auth_refused_total{reason}``: requests refused by tenant identity;
- per tenant (the policy's names: a bounded set): ``director_balancer_tenant_requests_total``
  and ``director_balancer_tenant_tokens_total{kind}`` by model,
  ``director_balancer_tenant_cancelled_total``, ``director_balancer_tenant_gpu_seconds_total``;
- with overflow on, ``director_balancer_overflow_total{outcome,sibling}``: what would have
  been shed, by outcome (``redirect``, ``proxy``, ``unreachable``, ``none-allowed``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector

from policies.model import SLO_LATENCY_BUCKETS
from regions.balancer.scheduling.capacity import UNBOUNDED
from regions.balancer.scheduling.region_demand import region_demand

if TYPE_CHECKING:
    from regions.balancer.scheduling.admission import Dispatcher
    from regions.balancer.types import RegionSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _PoolCollector(Collector):
    def __init__(self, region: str, dispatcher: Dispatcher) -> None:
        self.region = region
        self.dispatcher = dispatcher

    def collect(self) -> Iterator[Metric]:
        snap = self.dispatcher.pool.snapshot()
        in_flight = GaugeMetricFamily(
            "director_balancer_in_flight", "Requests in flight per backend", labels=["backend"]
        )
        work = GaugeMetricFamily(
            "director_balancer_work_tokens",
            "Predicted in-flight work per backend (decode-token equivalents)",
            labels=["backend"],
        )
        prefill = GaugeMetricFamily(
            "director_balancer_prefill_tokens",
            "Prompts sent per backend without a first byte yet (decode-token equivalents)",
            labels=["backend"],
        )
        rate = GaugeMetricFamily(
            "director_balancer_tokens_per_second",
            "Learned decode rate per backend",
            labels=["backend"],
        )
        for b in snap.backends:
            in_flight.add_metric([b.name], b.in_flight)
            work.add_metric([b.name], b.work_tokens)
            prefill.add_metric([b.name], b.prefill_tokens)
            rate.add_metric([b.name], b.tokens_per_s)
        queue = GaugeMetricFamily("director_balancer_queue", "Requests waiting in the region queue")
        queue.add_metric([], self.dispatcher.queued)
        capacity = GaugeMetricFamily(
            "director_balancer_capacity",
            "Requests a backend runs at once, as learned (or pinned); absent while unknown",
            labels=["backend", "source"],
        )
        limit = GaugeMetricFamily(
            "director_balancer_capacity_limit",
            "Requests admission lets be in flight at a backend (absent: unbounded)",
            labels=["backend"],
        )
        for backend in self.dispatcher.pool:
            learned = backend.cap_now
            if learned.slots is not None:
                capacity.add_metric([backend.name, learned.source], learned.slots)
            if learned.limit < UNBOUNDED:
                limit.add_metric([backend.name], learned.limit)
        tenants = GaugeMetricFamily(
            "director_balancer_tenant_in_flight",
            "Requests of a tenant bound to a backend and not ended", labels=["tenant"])
        for tenant, held in sorted(self.dispatcher.fair.in_flight.items()):
            tenants.add_metric([tenant], held)
        refused = GaugeMetricFamily(
            "director_balancer_model_refused",
            "1 for each model a backend is refused for by the version probe (kind: "
            "fingerprint, mixed, unlisted)",
            labels=["backend", "model", "kind"],
        )
        for b in snap.backends:
            for model, why in b.refused:
                refused.add_metric([b.name, model, why.split(":", 1)[0]], 1)
        yield from self._demand(snap)
        yield from (in_flight, work, prefill, rate, queue, capacity, limit, tenants, refused)

    def _demand(self, snap: RegionSnapshot) -> Iterator[Metric]:
        """The autoscaling signal per model (``scheduling.demand``)."""
        desired = GaugeMetricFamily(
            "director_desired_replicas",
            "GPU servers the model needs in this region: its home demand (arrivals, less a "
            "sibling's overflow, plus what was sent to a sibling) over a server's capacity "
            "(the region: the scrape's target label, as for every balancer metric)",
            labels=["model"])
        needed = GaugeMetricFamily(
            "director_demand_replicas_needed",
            "The desired replicas before rounding and the dead band", labels=["model"])
        rate = GaugeMetricFamily(
            "director_demand_home_rate",
            "Requests per second of this region's own demand for the model",
            labels=["model"])
        for reading in region_demand(self.dispatcher, snap):
            labels = [reading.model]
            desired.add_metric(labels, reading.desired)
            needed.add_metric(labels, reading.needed)
            rate.add_metric(labels, reading.home_rate)
        yield from (desired, needed, rate)


@dataclass(frozen=True, slots=True)
class BackendMetrics:
    """One backend's children of the per-request metric families, looked up once (a
    ``labels()`` call costs several times the update itself)."""

    decisions: Counter
    ttft: Histogram
    e2e: Histogram


@dataclass(frozen=True, slots=True)
class TenantMetrics:
    """One tenant and model's children of the per-request usage counters, looked up once."""

    requests: Counter
    input_tokens: Counter
    output_tokens: Counter
    cancelled: Counter
    gpu_seconds: Counter


class OverflowCollector(Collector):
    """The overflow counts (``Overflow.counts``, keys ``outcome`` or ``outcome:sibling``),
    read at scrape time."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "director_balancer_overflow",
            "Requests the region would have shed, by what overflow did with them",
            labels=["outcome", "sibling"],
        )
        for key, count in sorted(self.counts.items()):
            outcome, _, sibling = key.partition(":")
            family.add_metric([outcome, sibling], count)
        yield family


class BalancerMetrics:
    def __init__(self, region: str, dispatcher: Dispatcher) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_PoolCollector(region, dispatcher))
        r = self.registry
        self._routing(r)
        self._tenancy(r)
        self._clients(r)
        self._data_path(r)
        self._objectives(r)
        self._standby(r)

    def _standby(self, r: CollectorRegistry) -> None:
        """Standby servers woken (``signals.standby``)."""
        self.standby_wakes = Counter(
            "director_balancer_standby_wakes", "Standby servers woken, by outcome (ok, failed)",
            ["backend", "outcome"], registry=r)
        self.standby_wake_seconds = Histogram(
            "director_balancer_standby_wake_seconds",
            "Seconds from asking a standby server to wake to its serving",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=r)

    def standby_woke(self, backend: str, seconds: float, ok: bool) -> None:
        self.standby_wakes.labels(backend, "ok" if ok else "failed").inc()
        if ok:
            self.standby_wake_seconds.observe(seconds)

    def _objectives(self, r: CollectorRegistry) -> None:
        """What SLOs are computed from (``http.sli``), by model and tenant."""
        self.slo_requests = Counter(
            "director_balancer_slo_requests",
            "Requests counted towards availability objectives, by outcome (ok, error)",
            ["model", "tenant", "outcome"],
            registry=r,
        )
        self.slo_ttft = Histogram(
            "director_balancer_slo_ttft_seconds",
            "Time from a streamed request's arrival to its first token",
            ["model", "tenant"],
            buckets=SLO_LATENCY_BUCKETS,
            registry=r,
        )
        self.slo_itl = Histogram(
            "director_balancer_slo_itl_seconds",
            "A stream's mean time between tokens after the first",
            ["model", "tenant"],
            buckets=SLO_LATENCY_BUCKETS,
            registry=r,
        )

    def _routing(self, r: CollectorRegistry) -> None:
        """Decisions, retries, ejections, shedding and residency refusals."""
        self.decisions = Counter(
            "director_balancer_decisions", "Requests bound to a backend", ["backend"], registry=r
        )
        self.retries = Counter(
            "director_balancer_retries", "Retries on another backend", registry=r
        )
        self.ejections = Counter(
            "director_balancer_ejections", "Outlier ejections", ["backend"], registry=r
        )
        self.degraded = Counter(
            "director_balancer_degraded",
            "Requests a degradation ladder's step answered, by step (overflow, "
            "model=<m>, cache, shed)", ["step"], registry=r)
        self.cache = Counter(
            "director_balancer_cache",
            "Exact-match cache lookups by outcome (hit, miss) and answers stored or not",
            ["outcome"], registry=r)
        self.cache_lookup = Histogram(
            "director_balancer_cache_hit_seconds",
            "From the lookup to the replayed answer's end, for cache hits",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5), registry=r)
        self.hedges = Counter(
            "director_balancer_hedges",
            "Late first bytes by what hedging did (won, lost: a copy was sent; saturated, "
            "budget, no_backend: none was; failed: the copy failed)",
            ["outcome"], registry=r)
        self.resumes = Counter(
            "director_balancer_stream_resumes",
            "Streams whose upstream went silent mid-answer, by outcome (resumed: continued "
            "on another server; ended: whole but for its end; failed: an error event "
            "ended it, with the reason)",
            ["outcome", "reason"], registry=r)
        self.shed = Counter("director_balancer_shed", "Requests shed", ["reason"], registry=r)
        self.residency_refusals = Counter(
            "director_balancer_residency_refused",
            "Requests refused because this region may not serve the client",
            ["service"],
            registry=r,
        )
        self.adapter_requests = Counter(
            "director_balancer_adapter_requests",
            "Requests for a LoRA adapter by where they went (hit: a holder within the load "
            "bound; load: one started a load; joined: one waited for a load under way; "
            "queued: holders busy and no room elsewhere; refused)",
            ["outcome"], registry=r)
        self.adapter_loads = Counter(
            "director_balancer_adapter_loads", "LoRA adapter loads by backend and outcome",
            ["backend", "outcome"], registry=r)

    def adapter_requests_counted(self, outcome: str) -> None:
        self.adapter_requests.labels(outcome).inc()

    def adapter_loads_counted(self, backend: str, outcome: str) -> None:
        self.adapter_loads.labels(backend, outcome).inc()

    def _tenancy(self, r: CollectorRegistry) -> None:
        """Per tenant and model: requests, tokens, cancellations, GPU time; identity refusals."""
        self.tenant_requests = Counter(
            "director_balancer_tenant_requests", "Answered requests per tenant and model",
            ["tenant", "model"], registry=r)
        self.tenant_tokens = Counter(
            "director_balancer_tenant_tokens",
            "Tokens per tenant and model, as the engine counted them (kind input or output)",
            ["tenant", "model", "kind"], registry=r)
        self.tenant_cancelled = Counter(
            "director_balancer_tenant_cancelled", "Requests whose client left before the end",
            ["tenant"], registry=r)
        self.tenant_gpu_seconds = Counter(
            "director_balancer_tenant_gpu_seconds",
            "GPU time per tenant, estimated from the backends' learned speeds",
            ["tenant"], registry=r)
        self._tenants: dict[tuple[str, str], TenantMetrics] = {}
        self.auth_refused = Counter(
            "director_balancer_auth_refused",
            "Requests refused by tenant identity, by reason (401 credentials, 403 service, "
            "model or region)",
            ["reason"],
            registry=r,
        )

    def _clients(self, r: CollectorRegistry) -> None:
        """Clients that left, stalled or sent their request too slowly."""
        self.client_gone = Counter(
            "director_balancer_client_gone",
            "Clients that closed their connection before the answer's end (not errors)",
            ["when"],
            registry=r,
        )
        self.stalled_clients = Counter(
            "director_balancer_stalled_clients",
            "Clients cut for taking no byte of their answer for the stall deadline (their "
            "GPU slot and tenant concurrency freed)",
            registry=r,
        )
        self.slow_requests = Counter(
            "director_balancer_slow_requests",
            "Connections cut for sending their request's headers or body too slowly",
            ["phase"],
            registry=r,
        )

    def _data_path(self, r: CollectorRegistry) -> None:
        """Backend errors and latencies, and the shared state's link."""
        self.upstream_errors = Counter(
            "director_balancer_upstream_errors",
            "Backend errors seen in the data path",
            ["backend", "kind"],
            registry=r,
        )
        self.ttft = Histogram(
            "director_balancer_ttft_seconds",
            "Time to first byte of the response body",
            ["backend"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "director_balancer_e2e_seconds",
            "Request latency through the balancer",
            ["backend"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

        self.state_reachable = Gauge(
            "director_balancer_state_reachable",
            "1 while the shared state server answers, 0 while it does not",
            registry=r,
        )
        self.state_errors = Counter(
            "director_balancer_state_errors",
            "Failed exchanges with the shared state server (serving goes on)",
            ["op"],
            registry=r,
        )

        self._backends: dict[str, BackendMetrics] = {}

    def backend(self, name: str) -> BackendMetrics:
        """The per-request metrics of backend ``name`` (cached)."""
        found = self._backends.get(name)
        if found is None:
            found = self._backends[name] = BackendMetrics(
                self.decisions.labels(name), self.ttft.labels(name), self.e2e.labels(name)
            )
        return found

    def tenant(self, tenant: str, model: str) -> TenantMetrics:
        """The usage counters of ``tenant`` using ``model`` (cached)."""
        found = self._tenants.get((tenant, model))
        if found is None:
            found = self._tenants[(tenant, model)] = TenantMetrics(
                self.tenant_requests.labels(tenant, model),
                self.tenant_tokens.labels(tenant, model, "input"),
                self.tenant_tokens.labels(tenant, model, "output"),
                self.tenant_cancelled.labels(tenant),
                self.tenant_gpu_seconds.labels(tenant))
        return found

    def residency_refused(self, service: str) -> None:
        self.residency_refusals.labels(service or "*").inc()

    def render(self, accept: str = "") -> tuple[bytes, str]:
        """The exposition and its content type: OpenMetrics (with exemplars: the trace
        ids of sampled requests on the TTFT and E2E histograms) when ``accept`` (the
        scraper's ``Accept`` header) asks for it, Prometheus text otherwise."""
        if OPENMETRICS in accept:
            return openmetrics_latest(self.registry), OPENMETRICS_CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE
