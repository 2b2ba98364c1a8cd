# SPDX-License-Identifier: Apache-2.0
"""The balancer of one region: an aiohttp server in front of GPU servers.

The server side is aiohttp (``handler_cancellation=True`` turns a client disconnect into
the cancellation of the handler, which closes the upstream connection and so aborts the
work on the GPU). Inference requests go to each GPU server over its own pool of
keep-alive HTTP/1.1 connections (``upstream_pool.UpstreamPool``), whose body pieces are written
on to the client from the connection's callback (``relay``), unbuffered and without a
task wake-up per token. Control traffic to the servers (metric scrapes, ``/v1/models``,
engine info) uses one aiohttp ``ClientSession`` per backend.

Public routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST
/v1/embeddings``, ``GET /v1/models`` (union over usable backends, cached, behind tenancy:
``model_catalog``), ``GET /healthz``. On the admin listener (``admin``: loopback by
default, a bearer token off loopback): ``GET /metrics``, ``POST /_admin/drain`` and
``/_admin/undrain`` (``{"backend": NAME}``), ``POST /_admin/explain``, ``GET /_admin/state``.

With ``shared_state`` (a ``SharedStateConfig``: the Redis URL) the balancer publishes its
region's load about once a second and follows the GPU drain flags and probe health in the
shared state (``shared_state.StateLink``); state errors never stop serving.

``follow_policy`` applies each stored policy version's GPU servers live (``policy_follow``);
``/healthz`` and ``director_policy_info`` say which policy is in force (version, digest);
``overflow`` sends what the region would shed to an allowed sibling region (``overflow``).

::

    balancer = build_balancer("eu-west", [BackendSpec("gpu0", "http://10.0.0.5:8000",
                                                      ("llama-3-8b",))])
    async with balancer:             # listens on balancer.url
        ...
    # or: await serve("eu-west", region.gpus, BalancerConfig(listen=("0.0.0.0", 8080)))
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from policies.model import Policy
from regions.balancer.adapters.loader import AdapterLoader
from regions.balancer.adapters.placement import (
    AdapterPlacement,
    adapters_of,
    declared_slots,
)
from regions.balancer.adapters.stage import PlaceAdapter
from regions.balancer.config import BalancerConfig
from regions.balancer.degrade.cache_stage import ResponseCacheStage
from regions.balancer.degrade.ladder import DegradeLadder
from regions.balancer.http.admin import build_admin_app
from regions.balancer.http.admin_listen import AdminListen
from regions.balancer.http.client_timeouts import ClientGuard
from regions.balancer.http.connections import BackendConnections
from regions.balancer.http.exchange import Exchange, Stage, chain
from regions.balancer.http.metrics import BalancerMetrics, OverflowCollector
from regions.balancer.http.parse import Parse, ParseSettings
from regions.balancer.http.proxy import Proxy, ProxySettings
from regions.balancer.http.revision_choice import ChooseRevision
from regions.balancer.http.revision_outcomes import RevisionOutcomes
from regions.balancer.http.sli import RecordSli
from regions.balancer.http.tokenizers import Tokenizers
from regions.balancer.http.trace_stage import TraceRequests
from regions.balancer.lifecycle import Lifecycle
from regions.balancer.reports import Reports
from regions.balancer.request_chain import check_stages
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.demand import DemandSignal
from regions.balancer.scheduling.kv_event_index import KvEventIndex
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.scheduling.pool_health import ADMIN
from regions.balancer.scheduling.registry import (
    Registry,
    build_profile,
    register_builtin_plugins,
)
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.signals.engine_scrape import EngineScraper
from regions.balancer.signals.kv_event_follow import KvEventFollow
from regions.balancer.signals.load_report import ArrivalRate, region_load
from regions.balancer.signals.model_catalog import ModelCatalog
from regions.balancer.signals.overflow import Overflow, SpillOver
from regions.balancer.signals.policy_follow import PolicyFollow
from regions.balancer.signals.pool_update import PoolChange
from regions.balancer.signals.shared_state import StateLink
from regions.balancer.signals.standby import HoldForStandby, Standby
from regions.balancer.signals.usage_reconcile import UsageReconciler
from regions.balancer.tenancy.access import Identify, Tenancy
from regions.balancer.tenancy.accounting import Account, UsageRecorder
from regions.balancer.tenancy.residency_check import CheckResidency, ResidencyCheck
from regions.balancer.tenancy.tenant_quota import AdmitTenant, TenantQuotas
from regions.balancer.types import BackendSnapshot, Endpoint, RequestInfo
from routing import PluginTimings, TimingsCollector
from state.policy_metrics import PolicyCollector
from state.records import RegionLoad
from tenants.throttles import ThrottleLedger

TIMED_EVERY = 16  # one decision in this many has its plugins timed (routing.timings)

log = logging.getLogger(__name__)


class Balancer(Lifecycle, Reports):
    """One region's balancer: pool, pipeline, queue, proxy and the aiohttp app."""

    def __init__(
        self,
        region: str,
        backends: Iterable[Any],
        config: BalancerConfig | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.region = region
        self.config = cfg = config or BalancerConfig()
        self.jurisdiction, self.listen = cfg.jurisdiction, cfg.listen
        self.shared_state, self.capacity_rps = cfg.shared_state, cfg.capacity_rps
        specs = [BackendSpec.coerce(b, cfg.max_concurrency) for b in backends]
        self._build_scheduling(specs, rng or random.Random(0), clock)
        self._build_http(specs, clock)
        self._build_tenancy()
        self._build_signals()
        self.dispatcher.demand = DemandSignal(cfg.demand)
        self.handle = chain(self._stages(cfg.stages), self.proxy.forward)
        self.guard = ClientGuard(cfg.client, self.metrics.slow_requests.labels("headers").inc)
        self.app = self._build_app()
        self.admin = cfg.admin or AdminListen()
        self.admin_app = build_admin_app(self, self.admin.token)
        self.runner: web.AppRunner | None = None
        self.admin_runner: web.AppRunner | None = None
        self._port = self.listen[1]
        self._admin_port = self.admin.port

    # -- parts ---------------------------------------------------------------------------

    def _build_scheduling(self, specs: list[BackendSpec], rng: random.Random,
                          clock: Callable[[], float]) -> None:
        """The pool, the routing profile, the dispatcher and the metrics of both."""
        cfg = self.config
        self.pool = BackendPool(specs, outliers=cfg.outliers,
                                default_tokens_per_s=cfg.default_tokens_per_s, clock=clock,
                                capacity=cfg.capacity)
        self.registry = register_builtin_plugins(Registry())
        self.timings = PluginTimings(every=TIMED_EVERY)
        self.profile = build_profile(self.registry, filters=cfg.filters, scorers=cfg.scorers,
                                     picker=cfg.picker, rng=rng,
                                     scorer_params=cfg.scorer_params, timings=self.timings)
        for note in self.profile.notes:
            log.warning("region %s: profile: %s", self.region, note)
        self.dispatcher = Dispatcher(self.pool, self.profile, cfg.admission)
        # e.g. prefix-affinity learns what each backend holds
        self.dispatcher.on_bind.extend(o.on_bind for o in self.profile.bind_observers)
        self.metrics = BalancerMetrics(self.region, self.dispatcher)
        self.metrics.registry.register(TimingsCollector(
            "director_balancer_plugin_seconds",
            f"Run time of each routing plugin, one decision in {TIMED_EVERY} timed",
            self.timings))
        # the prefix-affinity scorer reads the backends' KV events where they publish them
        self.prefix_scorer = next((ws.scorer for ws in self.profile.scorers
                                   if isinstance(ws.scorer, PrefixAffinityScorer)), None)
        self.kv_index: KvEventIndex | None = None
        self.kv_follow: KvEventFollow | None = None
        if self.prefix_scorer is not None and any(s.kv_events for s in specs):
            self.kv_index = self.prefix_scorer.precise = KvEventIndex()
            self.kv_follow = KvEventFollow(self.kv_index, specs)

    def _build_http(self, specs: list[BackendSpec], clock: Callable[[], float]) -> None:
        """The connections to the backends, the parser and the proxy."""
        cfg = self.config
        self.connections = BackendConnections(cfg.connect_timeout_s, cfg.read_timeout_s)
        self.catalog = ModelCatalog(self.pool, self.connections.sessions, cfg.models_ttl_s,
                                    clock=clock)
        self.output_lengths = OutputLengths()
        self.outcomes = RevisionOutcomes()
        self.parse = Parse(
            ParseSettings(cfg.max_body_bytes, cfg.prefill_ratio, cfg.admission.queue_timeout_s,
                          prefix_hashes=self.prefix_scorer is not None,
                          kv_index=self.kv_index, client_body_s=cfg.client.body_s,
                          tokenizers=Tokenizers.of_backends(specs)),
            self.output_lengths, self.metrics.slow_requests.labels("body").inc)
        self.revisions = ChooseRevision({s.model: s for s in cfg.splits}, self.pool,
                                        self.profile.rng)
        self.placement = AdapterPlacement(cfg.adapters, declared_slots(specs), clock=clock)
        self.adapter_loader = AdapterLoader(self.placement, self.pool,
                                            self.connections.sessions, self.catalog,
                                            self.metrics.adapter_loads_counted)
        self.place_adapter = PlaceAdapter(self.placement, self.adapter_loader, self.pool,
                                          self.metrics.adapter_requests_counted)
        self.dispatcher.on_bind.append(self._adapter_bound)
        self.proxy = Proxy(ProxySettings(self.region, cfg.max_retries,
                                         client_stall_s=cfg.client.stall_s,
                                         max_resumes=cfg.max_resumes, silence=cfg.silence,
                                         hedge=cfg.hedge),
                           self.pool, self.dispatcher, self.metrics, self.connections.upstreams,
                           clock, self.output_lengths, self.outcomes)

    def _build_tenancy(self) -> None:
        """Identity, quotas, usage and the residency re-check."""
        self.residency_stage = CheckResidency(self.config.residency, self.region,
                                              self.metrics.residency_refused,
                                              self.placement.base_of)
        self.tenancy = Tenancy(self.config.policy, None, self.metrics.auth_refused,
                               self.dispatcher.fair, self._hold_for_tenants,
                               region=self.region)
        self.quotas = TenantQuotas(on_refused=self._refused)
        self.cache = ResponseCacheStage(self.region, self.pool, self.tenancy, self.metrics,
                                        self.config.cache)
        self.ladder = DegradeLadder(self.dispatcher, self.tenancy, self.cache, self.metrics,
                                    lambda: self.overflow, lambda: self.residency,
                                    lambda info: self.revisions.choose(info),
                                    self.config.degrade)
        self.recorder = UsageRecorder(self.metrics)
        self.throttles: ThrottleLedger | None = None

    def _build_signals(self) -> None:
        """The shared state's link, overflow, the policy follower, the engine scrapes and
        the usage reconciler."""
        cfg = self.config
        self.arrivals = ArrivalRate()
        self.link: StateLink | None = None
        self._link_lock = asyncio.Lock()
        overflow = cfg.overflow
        self.spill = SpillOver(Overflow(self.region, overflow, cfg.residency)
                               if overflow else None)
        if self.overflow is not None:
            self.metrics.registry.register(OverflowCollector(self.overflow.counts))
        self.policy_follow = PolicyFollow(self, cfg.follow_policy)
        self.standby = Standby(self.pool, self.dispatcher, self.connections.sessions,
                               cfg.standby, self.metrics.standby_woke)
        self.metrics.registry.register(PolicyCollector(
            "balancer", lambda: self.policy_follow.served, lambda: self.policy_follow.refused))
        self.scraper = EngineScraper(self.pool, self.connections.sessions, cfg.scrape_every_s,
                                     cfg.info_every_s)
        self.scraper.on_lora = self.placement.learn_active
        self.reconcile = UsageReconciler(self.pool, self.scraper.read_load,
                                         self.recorder.reconciled, cfg.usage_reconcile_s)

    # -- app -----------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes,
                              middlewares=[self.guard.middleware])
        for endpoint in Endpoint:
            app.router.add_post(endpoint.value, self._inference_handler(endpoint))
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.on_startup.append(self._open_sessions)
        app.on_cleanup.append(self._close_sessions)
        return app

    def _stages(self, names: Iterable[str]) -> list[Stage]:
        """The request's stages, in the configured order (``request_chain``)."""
        built: dict[str, Stage | None] = {
            "trace": (TraceRequests(self.config.tracer, self.region)
                      if self.config.tracer is not None else None),
            "sli": RecordSli(self.metrics, self.pool.clock),
            "identify": Identify(self.tenancy),
            "overflow": self.spill,
            "account": Account(self.region, self.tenancy, self.pool, self.recorder,
                               self.reconcile, self.config.prefill_ratio),
            "parse": self.parse,
            "residency": self.residency_stage,
            "tenant": AdmitTenant(self.tenancy, self.quotas),
            "revision": self.revisions,
            "degrade": self.ladder,
            "cache": self.cache,
            "standby": HoldForStandby(self.standby,
                                      lambda reason: self.metrics.shed.labels(reason).inc()),
            "adapter": self.place_adapter,
        }
        return [stage for name in check_stages(names) if (stage := built[name]) is not None]

    @property
    def overflow(self) -> Overflow | None:
        """Where this region's shed requests may go (None: overflow off)."""
        return self.spill.overflow

    @overflow.setter
    def overflow(self, overflow: Overflow | None) -> None:
        self.spill.overflow = overflow

    @property
    def residency(self) -> ResidencyCheck | None:
        """The residency re-check in force (a policy change replaces it)."""
        return self.residency_stage.check

    @residency.setter
    def residency(self, check: ResidencyCheck | None) -> None:
        self.residency_stage.check = check

    def _inference_handler(self, endpoint: Endpoint) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.StreamResponse:
            self.arrivals.arrived()
            return await self.handle(Exchange(request, endpoint))

        return handler

    def declare_adapters(self, region: Any, specs: list[BackendSpec]) -> None:
        """The policy's region changed: its adapters, and its servers' declared slots."""
        self.placement.declare(adapters_of(region), declared_slots(specs))

    def _adapter_bound(self, request: RequestInfo, backend: BackendSnapshot) -> None:
        if request.model in self.placement.adapters:
            self.placement.bound(backend.name, request.model)

    def _refused(self, tenant: str, status: int, limit: str | None) -> None:
        """Count a quota refusal for the status page (``tenants.throttles``)."""
        if self.throttles is not None:
            self.throttles.record(tenant, self.region, status, limit)

    def _hold_for_tenants(self, tenants: bool) -> None:
        """With tenants, hold at the learned capacities (provisional ones until learned) so
        the fair share orders requests (``--late-binding`` on the command line holds in any
        case, at learned capacities only)."""
        capacity = self.config.capacity
        self.pool.hold_at_capacity(tenants or capacity.late_binding,
                                   tenants or capacity.provisional)

    async def _open_sessions(self, app: web.Application) -> None:
        self.connections.open(self.pool)

    async def _close_sessions(self, app: web.Application) -> None:
        # the requests have ended: settle the cancelled ones' tokens while sessions are open
        await self.reconcile.close()
        await self.connections.close()
        if self.overflow is not None:
            await self.overflow.close()

    # -- operator API --------------------------------------------------------------------

    def drain(self, backend: str) -> None:
        """No new requests to ``backend``; its in-flight requests and streams finish."""
        self.pool.set_draining(backend, True, ADMIN)

    def undrain(self, backend: str) -> None:
        """Lift the admin drain (a drain set in the shared state stays until lifted there)."""
        self.pool.set_draining(backend, False, ADMIN)

    def measure_load(self) -> RegionLoad:
        """The region's load now (what is published); ticks the arrival rate."""
        return region_load(
            self.pool.snapshot(),
            queued=self.dispatcher.queued,
            queued_cost_tokens=self.dispatcher.queued_cost(),
            rate=self.arrivals.tick(),
            capacity_rps=self.capacity_rps,
            now=time.time(),
        )

    def apply_policy(self, policy: Policy, version: int | None = None) -> PoolChange | None:
        """Serve ``policy``'s GPU servers for this region (see ``policy_follow``) and
        identify its tenants."""
        return self.policy_follow.apply(policy, version)

    def set_healthy(self, backend: str, healthy: bool) -> None:
        """Probe result (from the workers / state store); a return starts slow start."""
        self.pool.set_healthy(backend, healthy)

    async def wait_drained(self, backend: str, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while self.pool[backend].in_flight:
                await asyncio.sleep(0.01)

    # -- handlers ------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        """The models of the usable backends (``model_catalog``: cached, never a read of
        every backend per request); with tenants, only for an identified tenant and only
        the models it may use."""
        who = None
        if self.tenancy.enabled:
            checked = await self.tenancy.check(request)
            if isinstance(checked, web.Response):
                return checked
            who = checked.caller
        models = await self.catalog.models()
        if who is not None and who.tenant.models:
            models = [m for m in models if m["id"] in who.tenant.models]
        return web.json_response({"object": "list", "data": models})

    async def _healthz(self, request: web.Request) -> web.Response:
        snap = self.pool.snapshot()
        usable = sum(1 for b in snap.backends if b.usable)
        body = {
            "region": self.region,
            "usable_backends": usable,
            "in_flight": self.pool.in_flight(),
            "queued": self.dispatcher.queued,
            "policy": self.policy_follow.describe(),
        }
        return web.json_response(body, status=200 if usable else 503)



def backends_from_region(region: Any, max_concurrency: int | None = None) -> list[BackendSpec]:
    """``BackendSpec``s from a ``policies.model.Region``'s GPU servers (capacity learned
    unless the policy, or ``max_concurrency``, pins it)."""
    return [BackendSpec.coerce(gpu, max_concurrency) for gpu in region.gpus]


def build_balancer(region_name: str, backends: Iterable[Any],
                   config: BalancerConfig | None = None, *,
                   rng: random.Random | None = None) -> Balancer:
    """Build (not start) a region's balancer. ``backends``: ``BackendSpec``s or
    ``policies.model.GpuServer``s; ``config``: everything else (``BalancerConfig``).
    ``balancer.app`` is the aiohttp app; ``start()`` creates ``balancer.runner`` and
    listens."""
    return Balancer(region_name, backends, config, rng=rng)


async def serve(region_name: str, backends: Iterable[Any], config: BalancerConfig, *,
                ready: Callable[[Balancer], None] | None = None) -> None:
    """Run a balancer until cancelled (``director region serve`` calls this)."""
    async with build_balancer(region_name, backends, config) as balancer:
        if ready is not None:
            ready(balancer)
        await asyncio.Event().wait()
