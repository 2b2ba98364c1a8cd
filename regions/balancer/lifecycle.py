# SPDX-License-Identifier: Apache-2.0
"""A balancer's lifecycle: ``start`` follows the shared state (flags read once before the
first request), attaches the tenant ledgers and listens on the public and admin ports;
``stop`` undoes it in reverse; ``relink`` rebuilds the shared-state link when the pool
changes."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self

from aiohttp import web

from regions.balancer.adapters.loader import AdapterLoader
from regions.balancer.config import BalancerConfig
from regions.balancer.degrade.cache_stage import ResponseCacheStage
from regions.balancer.degrade.response_store import RedisStore
from regions.balancer.http.admin_listen import AdminListen
from regions.balancer.http.client_timeouts import ClientGuard, GuardedSite
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.revision_choice import ChooseRevision
from regions.balancer.http.revision_outcomes import RevisionOutcomes
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.signals.engine_scrape import EngineScraper
from regions.balancer.signals.kv_event_follow import KvEventFollow
from regions.balancer.signals.policy_follow import PolicyFollow
from regions.balancer.signals.shared_state import SharedStateConfig, StateLink
from regions.balancer.signals.standby import Standby
from regions.balancer.signals.usage_reconcile import UsageReconciler
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.tenancy.accounting import UsageRecorder
from regions.balancer.tenancy.tenant_quota import TenantQuotas
from state.aio import AsyncStateStore
from state.records import RegionLoad
from tenants.throttles import ThrottleLedger
from tenants.usage import UsageLedger

SHUTDOWN_TIMEOUT_S = 2.0
_NO_STATE = SharedStateConfig("")  # the defaults of a shared state attached by a test


class Lifecycle:
    """Start, stop and relink of a balancer (a mixin of ``Balancer``, which has the parts
    named below)."""

    region: str
    config: BalancerConfig
    listen: tuple[str, int]
    shared_state: SharedStateConfig | None
    pool: BackendPool
    metrics: BalancerMetrics
    link: StateLink | None
    _link_lock: asyncio.Lock
    tenancy: Tenancy
    quotas: TenantQuotas
    recorder: UsageRecorder
    cache: ResponseCacheStage
    throttles: ThrottleLedger | None
    reconcile: UsageReconciler
    outcomes: RevisionOutcomes
    revisions: ChooseRevision
    scraper: EngineScraper
    adapter_loader: AdapterLoader
    kv_follow: KvEventFollow | None
    policy_follow: PolicyFollow
    standby: Standby
    guard: ClientGuard
    app: web.Application
    admin_app: web.Application
    admin: AdminListen
    runner: web.AppRunner | None
    admin_runner: web.AppRunner | None
    _port: int
    _admin_port: int

    if TYPE_CHECKING:  # Balancer's, for the type checker only (never shadow it)
        def measure_load(self) -> RegionLoad: ...

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
            self.cache.store = RedisStore(self.link.store.client, self.link.store.keys.prefix,
                                          self.region)
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
        await self.adapter_loader.start(self.config.adapter_sync_s)
        if self.kv_follow is not None:
            await self.kv_follow.start()
        await self.policy_follow.start()
        await self.standby.start()

    async def stop(self) -> None:
        await self.standby.stop()
        await self.policy_follow.stop()
        if self.kv_follow is not None:
            await self.kv_follow.stop()
        await self.scraper.__aexit__()
        await self.adapter_loader.stop()
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
        # a relink keeps the balancer's name: its load record goes on, not a second one
        return StateLink(store, self.region, self.pool, self.measure_load, config,
                         self.metrics, outcomes=self.outcomes, revisions=self.revisions,
                         instance=self.link.instance if self.link is not None else None)

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

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
