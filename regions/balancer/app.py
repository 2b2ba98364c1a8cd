# SPDX-License-Identifier: Apache-2.0
"""The balancer of one region: an aiohttp server in front of GPU servers.

The server side is aiohttp (``handler_cancellation=True`` turns a client disconnect into
the cancellation of the handler, which closes the upstream connection and so aborts the
work on the GPU). Inference requests go to each GPU server over its own pool of
keep-alive HTTP/1.1 connections (``upstream.UpstreamPool``), whose body pieces are written
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
    # or: await serve("eu-west", region.gpus, listen=("0.0.0.0", 8080))
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from policies.model import Policy
from regions.balancer.http.admin import build_admin_app
from regions.balancer.http.admin_listen import AdminListen
from regions.balancer.http.client_timeouts import ClientGuard, ClientTimeouts, GuardedSite
from regions.balancer.http.connections import BackendConnections
from regions.balancer.http.exchange import Exchange, Stage, chain
from regions.balancer.http.metrics import BalancerMetrics, OverflowCollector
from regions.balancer.http.parse import Parse, ParseSettings
from regions.balancer.http.proxy import Proxy, ProxySettings
from regions.balancer.http.request_info import parse_request
from regions.balancer.request_chain import STAGES, check_stages
from regions.balancer.scheduling.admission import AdmissionConfig, Dispatcher
from regions.balancer.scheduling.backends import ADMIN, BackendPool, BackendSpec, OutlierConfig
from regions.balancer.scheduling.capacity import UNBOUNDED, Capacity, CapacityConfig
from regions.balancer.scheduling.kv_event_index import KvEventIndex
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.scheduling.registry import (
    DEFAULT_FILTERS,
    DEFAULT_PICKER,
    DEFAULT_SCORERS,
    Registry,
    build_profile,
    register_builtin_plugins,
)
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.signals.engine_scrape import EngineScraper
from regions.balancer.signals.kv_event_follow import KvEventFollow
from regions.balancer.signals.load_report import ArrivalRate, region_load
from regions.balancer.signals.model_catalog import DEFAULT_TTL_S, ModelCatalog
from regions.balancer.signals.overflow import Overflow, OverflowConfig, SpillOver
from regions.balancer.signals.policy_follow import FollowPolicy, PolicyFollow
from regions.balancer.signals.pool_update import PoolChange
from regions.balancer.signals.shared_state import SharedStateConfig, StateLink
from regions.balancer.signals.usage_reconcile import UsageReconciler
from regions.balancer.tenancy.access import Identify, Tenancy
from regions.balancer.tenancy.accounting import Account, UsageRecorder
from regions.balancer.tenancy.residency_check import CheckResidency, ResidencyCheck
from regions.balancer.tenancy.tenant_quota import AdmitTenant, TenantQuotas
from regions.balancer.types import Endpoint
from routing import PluginTimings, TimingsCollector
from state.aio import AsyncStateStore
from state.policy_metrics import PolicyCollector
from state.records import RegionLoad
from tenants.throttles import ThrottleLedger
from tenants.usage import UsageLedger

SHUTDOWN_TIMEOUT_S = 2.0
TIMED_EVERY = 16  # one decision in this many has its plugins timed (routing.timings)
_NO_STATE = SharedStateConfig("")  # the defaults of a shared state attached by a test

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BalancerConfig:
    """Settings of one balancer (defaults suit a vLLM fleet).

    ``max_concurrency``: pins every backend's capacity that the policy does not pin (None,
    the default: learned from the backends, see ``capacity``); ``capacity``: how it is
    learned and the headroom of requests allowed to wait at a server beyond it (everything
    beyond waits in the region queue, late bound); ``scrape_every_s``: how often the
    balancer reads each busy backend's metrics (0: never; then only what the shared state
    carries), ``info_every_s`` its engine's info endpoint; ``scorer_params``: keyword
    arguments per scorer name, e.g. ``{"size-aware": {"hold": 0.5}}``;
    ``usage_reconcile_s``: with tenants, at most how often each backend's metrics are read
    to add the output tokens its engine generated for cancelled requests after the last
    piece relayed (``usage_reconcile``; independent of ``scrape_every_s``; 0: never);
    ``client``: how long a client may keep the balancer waiting (``client_timeouts``).
    ``models_ttl_s``: how long each backend's ``/v1/models`` is cached (``model_catalog``).
    ``stages``: a request's stages, in order (``request_chain``).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    max_retries: int = 2
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 300.0
    prefill_ratio: float = 150.0
    default_tokens_per_s: float = 50.0
    max_concurrency: int | None = None
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    scrape_every_s: float = 1.0
    info_every_s: float = 30.0
    filters: tuple[str, ...] = DEFAULT_FILTERS
    scorers: tuple[tuple[str, float], ...] = DEFAULT_SCORERS
    picker: str = DEFAULT_PICKER
    scorer_params: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    outliers: OutlierConfig = field(default_factory=OutlierConfig)
    usage_reconcile_s: float = 1.0
    client: ClientTimeouts = field(default_factory=ClientTimeouts)
    models_ttl_s: float = DEFAULT_TTL_S
    stages: tuple[str, ...] = STAGES


class Balancer:
    """One region's balancer: pool, pipeline, queue, proxy and the aiohttp app."""

    def __init__(
        self,
        region: str,
        backends: Iterable[Any],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        jurisdiction: str | None = None,
        config: BalancerConfig | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        residency: ResidencyCheck | None = None,
        shared_state: SharedStateConfig | None = None,
        capacity_rps: float | None = None,
        overflow: OverflowConfig | None = None,
        follow_policy: FollowPolicy | None = None,
        policy: Policy | None = None,
        admin: AdminListen | None = None,
    ) -> None:
        self.region = region
        self.jurisdiction = jurisdiction
        self.config = cfg = config or BalancerConfig()
        self.listen = listen
        specs = [BackendSpec.coerce(b, cfg.max_concurrency) for b in backends]
        self.pool = BackendPool(
            specs,
            outliers=cfg.outliers,
            default_tokens_per_s=cfg.default_tokens_per_s,
            clock=clock,
            capacity=cfg.capacity,
        )
        self.registry = register_builtin_plugins(Registry())
        self.timings = PluginTimings(every=TIMED_EVERY)
        self.profile = build_profile(
            self.registry,
            filters=cfg.filters,
            scorers=cfg.scorers,
            picker=cfg.picker,
            rng=rng or random.Random(0),
            scorer_params=cfg.scorer_params,
            timings=self.timings,
        )
        for note in self.profile.notes:
            log.warning("region %s: profile: %s", region, note)
        self.dispatcher = Dispatcher(self.pool, self.profile, cfg.admission)
        # e.g. prefix-affinity learns what each backend holds
        self.dispatcher.on_bind.extend(o.on_bind for o in self.profile.bind_observers)
        self.metrics = BalancerMetrics(region, self.dispatcher)
        self.metrics.registry.register(TimingsCollector(
            "director_balancer_plugin_seconds",
            f"Run time of each routing plugin, one decision in {TIMED_EVERY} timed",
            self.timings))
        self.residency_stage = CheckResidency(residency, region, self.metrics.residency_refused)
        self.connections = BackendConnections(cfg.connect_timeout_s, cfg.read_timeout_s)
        self.catalog = ModelCatalog(self.pool, self.connections.sessions, cfg.models_ttl_s)
        # the prefix-affinity scorer reads the backends' KV events where they publish them
        prefix_scorer = next((ws.scorer for ws in self.profile.scorers
                              if isinstance(ws.scorer, PrefixAffinityScorer)), None)
        self.prefix_scorer = prefix_scorer
        self.kv_index: KvEventIndex | None = None
        self.kv_follow: KvEventFollow | None = None
        if prefix_scorer is not None and any(s.kv_events for s in specs):
            self.kv_index = prefix_scorer.precise = KvEventIndex()
            self.kv_follow = KvEventFollow(self.kv_index, specs)
        self.output_lengths = OutputLengths()
        self.parse = Parse(
            ParseSettings(cfg.max_body_bytes, cfg.prefill_ratio, cfg.admission.queue_timeout_s,
                          prefix_hashes=prefix_scorer is not None, kv_index=self.kv_index,
                          client_body_s=cfg.client.body_s),
            self.output_lengths, self.metrics.slow_requests.labels("body").inc)
        self.proxy = Proxy(
            ProxySettings(region, cfg.max_retries, client_stall_s=cfg.client.stall_s),
            self.pool,
            self.dispatcher,
            self.metrics,
            self.connections.upstreams,
            clock,
            self.output_lengths,
        )
        self.tenancy = Tenancy(policy, None, self.metrics.auth_refused, self.dispatcher.fair,
                               self._hold_for_tenants, region=region)
        self.quotas = TenantQuotas(on_refused=self._refused)
        self.recorder = UsageRecorder(self.metrics)
        self.throttles: ThrottleLedger | None = None
        self.shared_state = shared_state
        self.capacity_rps = capacity_rps
        self.arrivals = ArrivalRate()
        self.link: StateLink | None = None
        self._link_lock = asyncio.Lock()
        self.spill = SpillOver(Overflow(region, overflow, residency) if overflow else None)
        if self.overflow is not None:
            self.metrics.registry.register(OverflowCollector(self.overflow.counts))
        self.policy_follow = PolicyFollow(self, follow_policy)
        self.metrics.registry.register(PolicyCollector(
            "balancer", lambda: self.policy_follow.served, lambda: self.policy_follow.refused))
        self.scraper = EngineScraper(self.pool, self.connections.sessions, cfg.scrape_every_s,
                                     cfg.info_every_s)
        self.reconcile = UsageReconciler(self.pool, self.scraper.read_load,
                                         self.recorder.reconciled, cfg.usage_reconcile_s)
        self.handle = chain(self._stages(cfg.stages), self.proxy.forward)
        self.guard = ClientGuard(cfg.client, self.metrics.slow_requests.labels("headers").inc)
        self.app = self._build_app()
        self.admin = admin or AdminListen()
        self.admin_app = build_admin_app(self, self.admin.token)
        self.runner: web.AppRunner | None = None
        self.admin_runner: web.AppRunner | None = None
        self._port = listen[1]
        self._admin_port = self.admin.port

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
        built: dict[str, Stage] = {
            "identify": Identify(self.tenancy),
            "overflow": self.spill,
            "account": Account(self.region, self.tenancy, self.pool, self.recorder,
                               self.reconcile, self.config.prefill_ratio),
            "parse": self.parse,
            "residency": self.residency_stage,
            "tenant": AdmitTenant(self.tenancy, self.quotas),
        }
        return [built[name] for name in check_stages(names)]

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

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return _url(self.listen[0], self._port)

    @property
    def admin_port(self) -> int:
        return self._admin_port

    @property
    def admin_url(self) -> str:
        """Where ``/metrics`` and ``/_admin/*`` are served (``admin``)."""
        return _url(self.admin.host, self._admin_port)

    async def start(self) -> None:
        """Follow the shared state (if any: flags read once before the first request),
        then listen."""
        if self.runner is not None:
            return
        if self.shared_state is not None and self.link is None:
            cfg = self.shared_state
            store = AsyncStateStore.from_url(cfg.url, prefix=cfg.prefix,
                                             timeout=max(cfg.timeout_s, cfg.quota_wait_s))
            self.link = self._new_link(store)
            await self.link.start()
        if self.link is not None:
            self.tenancy.attach(self.link.store, self.shared_state.key_table_file
                                if self.shared_state is not None else None)
            self.quotas.attach(self.link.store, (self.shared_state or _NO_STATE).quota_wait_s)
            self.recorder.ledger = UsageLedger(self.link.store)
            await self.recorder.ledger.__aenter__()
            self.throttles = ThrottleLedger(self.link.store)
            await self.throttles.__aenter__()
        await self.tenancy.__aenter__()
        runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            access_log=None,
            keepalive_timeout=self.config.client.idle_s,
            lingering_time=self.config.client.linger_s,
        )
        await runner.setup()  # opens the backends' sessions
        if self.tenancy.enabled:  # the engines' token counters before any request
            await self.reconcile.baseline_all()
        site = GuardedSite(runner, self.listen[0], self.listen[1], self.guard)
        await site.start()
        self._port = runner.addresses[0][1]
        self.runner = runner
        admin_runner = web.AppRunner(self.admin_app, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
                                     access_log=None)
        await admin_runner.setup()
        self.admin_runner = admin_runner
        await web.TCPSite(admin_runner, self.admin.host, self.admin.port,
                          reuse_address=True).start()
        self._admin_port = admin_runner.addresses[0][1]
        await self.scraper.__aenter__()
        if self.kv_follow is not None:
            await self.kv_follow.start()
        await self.policy_follow.start()

    async def stop(self) -> None:
        await self.policy_follow.stop()
        if self.kv_follow is not None:
            await self.kv_follow.stop()
        await self.scraper.__aexit__()
        if self.admin_runner is not None:
            admin_runner, self.admin_runner = self.admin_runner, None
            await admin_runner.cleanup()
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()
        await self.tenancy.__aexit__(None, None, None)
        await self.quotas.close()
        if self.recorder.ledger is not None:
            await self.recorder.ledger.__aexit__(None, None, None)
        if self.throttles is not None:
            await self.throttles.__aexit__(None, None, None)
        if self.link is not None:
            link, self.link = self.link, None
            await link.stop()
            await link.store.close()

    def _new_link(self, store: AsyncStateStore) -> StateLink:
        assert self.shared_state is not None
        config = self.shared_state
        if self.config.scrape_every_s > 0:  # the balancer reads the servers itself, fresher
            config = dataclasses.replace(config, follow_load=False)
        return StateLink(store, self.region, self.pool, self.measure_load, config, self.metrics)

    async def relink(self, mutate: Callable[[], None] | None = None) -> None:
        """Rebuild the shared-state link (it follows the backends in the pool when built);
        ``mutate`` changes the pool while no link runs."""
        async with self._link_lock:
            old = self.link
            if old is not None:
                await old.stop()
            if mutate is not None:
                mutate()
            if old is not None:
                self.link = self._new_link(old.store)
                await self.link.start()

    async def __aenter__(self) -> Balancer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

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

    def explain(
        self, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Why this request would go where: the pipeline's chain of steps, as data."""
        endpoint = Endpoint(path)
        info = parse_request(
            endpoint,
            body,
            headers or {},
            prefill_ratio=self.config.prefill_ratio,
            lengths=self.output_lengths,
            with_prefix=self.parse.settings.prefix_hashes,
            token_block_size=self.parse.token_block_size(),
        )
        decision = self.dispatcher.explain(info)
        return {
            "region": self.region,
            "profile": self.profile.name,
            "capacity": {b.name: describe_capacity(b.cap_now, b.in_flight) for b in self.pool},
            "request": {
                "model": info.model,
                "prompt_tokens": info.prompt_tokens,
                "output_tokens": info.output_tokens,
                "cost_tokens": info.cost_tokens,
                "priority": info.priority,
                "session": info.session,
            },
            **decision.to_json(),
            **({"prefix": self.prefix_scorer.describe(info, self.pool.snapshot().backends)}
               if self.prefix_scorer is not None else {}),
            "queued": self.dispatcher.queued,
        }

    def state(self) -> dict[str, Any]:
        snap = self.pool.snapshot()
        link = self.link
        return {
            "region": self.region,
            "queued": self.dispatcher.queued,
            "retry_after": self.dispatcher.retry_after(),
            "policy_version": self.policy_follow.version,
            "overflow": None if self.overflow is None else self.overflow.describe(),
            "shared_state": None
            if link is None
            else {
                "reachable": link.reachable,
                "published": None
                if link.published is None
                else {
                    "utilization": round(link.published.utilization, 4),
                    "capacity": round(link.published.capacity, 3),
                    "timestamp": link.published.timestamp,
                },
            },
            "backends": [
                {
                    "name": b.name,
                    "healthy": b.healthy,
                    "ejected": b.ejected,
                    "draining": b.draining,
                    "drained_by": sorted(self.pool[b.name].drains),
                    "in_flight": b.in_flight,
                    "cap": b.cap,
                    "limit": b.limit,
                    "capacity": {
                        "slots": self.pool[b.name].cap_now.slots,
                        "source": self.pool[b.name].cap_now.source,
                        "limit": self.pool[b.name].cap_now.limit,
                        "provisional": self.pool[b.name].cap_now.provisional,
                    },
                    "work_tokens": round(b.work_tokens, 3),
                    "prefill_tokens": round(b.prefill_tokens, 3),
                    "tokens_per_s": round(b.tokens_per_s, 3),
                    "rate_learned": b.rate_learned,
                }
                for b in snap.backends
            ],
        }

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



def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def describe_capacity(capacity: Capacity, in_flight: int) -> str:
    """One backend's capacity in explain's words."""
    if capacity.provisional:
        return (f"capacity unknown, provisional limit {capacity.limit} in flight (from the most "
                f"it was seen running, until its metrics show it saturated); "
                f"{in_flight} in flight")
    if capacity.slots is None:
        held = "at most " + str(capacity.limit) if capacity.limit < UNBOUNDED else "nothing held"
        return (f"capacity unknown ({held}: least outstanding requests until its metrics show "
                f"it saturated); {in_flight} in flight")
    return (f"capacity {capacity.slots} ({capacity.source}), limit {capacity.limit} in flight; "
            f"{in_flight} in flight")


def backends_from_region(region: Any, max_concurrency: int | None = None) -> list[BackendSpec]:
    """``BackendSpec``s from a ``policies.model.Region``'s GPU servers (capacity learned
    unless the policy, or ``max_concurrency``, pins it)."""
    return [BackendSpec.coerce(gpu, max_concurrency) for gpu in region.gpus]


def build_balancer(
    region_name: str,
    backends: Iterable[Any],
    listen: tuple[str, int] = ("127.0.0.1", 0),
    jurisdiction: str | None = None,
    *,
    config: BalancerConfig | None = None,
    rng: random.Random | None = None,
    residency: ResidencyCheck | None = None,
    shared_state: SharedStateConfig | None = None,
    capacity_rps: float | None = None,
    overflow: OverflowConfig | None = None,
    follow_policy: FollowPolicy | None = None,
    policy: Policy | None = None,
    admin: AdminListen | None = None,
) -> Balancer:
    """Build (not start) a region's balancer. ``backends``: ``BackendSpec``s or
    ``policies.model.GpuServer``s. ``balancer.app`` is the aiohttp app; ``start()``
    creates ``balancer.runner`` and listens. ``residency`` re-checks every client;
    ``shared_state`` publishes load and follows drains in Redis; ``capacity_rps`` (the
    policy's region capacity) is what the published utilization is relative to;
    ``overflow`` sends what would be shed to a sibling region (needs ``residency``);
    ``follow_policy`` applies the stored policy's GPU servers live (each version through
    its ``load``, the policy gate); ``policy``: whose ``identity`` and ``tenants`` the
    balancer enforces (``tenancy``); ``admin``: where ``/metrics`` and ``/_admin/*`` listen
    (default: 127.0.0.1, any free port; see ``admin``)."""
    return Balancer(
        region_name,
        backends,
        listen=listen,
        jurisdiction=jurisdiction,
        config=config,
        rng=rng,
        residency=residency,
        shared_state=shared_state,
        capacity_rps=capacity_rps,
        overflow=overflow,
        follow_policy=follow_policy,
        policy=policy,
        admin=admin,
    )


async def serve(
    region_name: str,
    backends: Iterable[Any],
    listen: tuple[str, int] = ("127.0.0.1", 8080),
    jurisdiction: str | None = None,
    *,
    config: BalancerConfig | None = None,
    ready: Callable[[Balancer], None] | None = None,
    residency: ResidencyCheck | None = None,
    shared_state: SharedStateConfig | None = None,
    capacity_rps: float | None = None,
    overflow: OverflowConfig | None = None,
    follow_policy: FollowPolicy | None = None,
    policy: Policy | None = None,
    admin: AdminListen | None = None,
) -> None:
    """Run a balancer until cancelled (``director region serve`` calls this)."""
    balancer = build_balancer(
        region_name,
        backends,
        listen,
        jurisdiction,
        config=config,
        residency=residency,
        shared_state=shared_state,
        capacity_rps=capacity_rps,
        overflow=overflow,
        follow_policy=follow_policy,
        policy=policy,
        admin=admin,
    )
    async with balancer:
        if ready is not None:
            ready(balancer)
        await asyncio.Event().wait()
