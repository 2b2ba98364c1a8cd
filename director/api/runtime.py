"""Everything one API instance runs: state store clients, the snapshot refresher, the policy
holder and its follower, drains, chaos, tokens, audit log and metrics.

Built from an ``ApiConfig``; ``start()`` and ``stop()`` run inside the server's event loop
(the app's lifespan).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp

from director.api.audit import AuditLog
from director.api.auth import TokenStore
from director.api.chaos import GpuChaos
from director.api.config import ApiConfig
from director.api.control import ControlClient
from director.api.deadman import Deadman
from director.api.drains import Drains
from director.api.metrics import ApiMetrics
from director.api.policy_disk import PolicyDisk
from director.api.policy_follow import follow, sync_once
from director.api.policy_start import starting_policy
from director.api.policy_store import ActivePolicy, PolicyHolder
from director.api.samples import sample_decisions
from director.api.status import StatusInputs, build_status, read_gpu_facts
from director.api.usage_lag import UsageLogGauges
from director.geo import GeoLocator
from director.refresh import SnapshotRefresher
from director.refresh.metrics import RefresherMetrics
from director.rollouts.controller import RolloutController
from director.rollouts.metrics import RolloutCollector
from state import AsyncStateStore, StateError, StateStore
from state.instances import Instance, this_process
from state.policy_metrics import PolicyCollector
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)


ROLLOUT_TICK_S = 2.0  # how often running rollouts are judged (a failed gate rolls back)


class ApiRuntime:
    def __init__(self, config: ApiConfig) -> None:
        self.config = config
        self.metrics = ApiMetrics()
        self.tokens = TokenStore(config.tokens_path)
        self.audit = AuditLog(config.audit_path)
        self.locator = GeoLocator(config.geoip_path)
        self.store = AsyncStateStore.from_url(config.redis_url, prefix=config.prefix,
                                              timeout=config.state_timeout)
        self.sync_store = StateStore.from_url(config.redis_url, prefix=config.prefix,
                                              timeout=config.state_timeout)
        disk = PolicyDisk(config.policy_store) if config.policy_store else None
        start = starting_policy(config.policy, disk)  # the newest accepted on disk, or the file
        policy = start.policy
        self.holder = PolicyHolder(start.document, policy, self.sync_store, disk,
                                   proofs=start.proofs, version=start.version,
                                   deadline_s=config.policy_deadline)
        self.refresher = SnapshotRefresher(
            self.store, policy, metrics=RefresherMetrics(self.metrics.registry),
            heartbeat=this_process("api", config.listen))
        self.holder.on_swap(lambda active: self.refresher.set_policy(active.policy))
        self.metrics.policy_version.set_function(lambda: self.holder.current.version)
        self.metrics.policy_reload_failures.set_function(lambda: self.holder.reload_failures)
        self.metrics.registry.register(
            PolicyCollector("api", lambda: self.holder.current.identity))
        self.drain_timers = Deadman()
        self.fault_timers = Deadman()
        self.drains = Drains(self.store, self.drain_timers, self.audit)
        self.usage_log = UsageLogGauges(self.store, self.metrics.registry)
        self.control = ControlClient(config.control_socket) if config.control_socket else None
        self._http: aiohttp.ClientSession | None = None
        self._chaos: GpuChaos | None = None
        self._follower: asyncio.Task[None] | None = None
        self._drain_resumer: asyncio.Task[None] | None = None
        self.rollouts = RolloutController(
            self.store, lambda who, action, target, detail: self.audit.record(
                who, action, target, detail))
        self.metrics.registry.register(
            RolloutCollector(lambda: list(self.rollouts.known.values())))
        self._rollout_loop: asyncio.Task[None] | None = None

    @property
    def active(self) -> ActivePolicy:
        return self.holder.current

    @property
    def chaos(self) -> GpuChaos:
        if self._chaos is None:
            raise RuntimeError("runtime not started")
        return self._chaos

    async def start(self) -> None:
        """Read the state once, take the policy Redis holds (or store ours, when Redis
        holds none or an older one), then follow both."""
        self._http = aiohttp.ClientSession()
        self._chaos = GpuChaos(self._http, self.fault_timers)
        with contextlib.suppress(StateError):
            await sync_once(self.holder, self.store)
        await self.refresher.start()
        self._follower = asyncio.create_task(
            follow(self.holder, self.store, self.config.follow_interval), name="policy-follow")
        self._drain_resumer = asyncio.create_task(self._resume_drains(), name="drain-resume")
        self._rollout_loop = asyncio.create_task(self._drive_rollouts(), name="rollouts")
        self.usage_log.start()

    async def _resume_drains(self) -> None:
        """Take over the ttls of drains set by an earlier API (retried while Redis is down;
        meanwhile every reader already ignores a drain past its end)."""
        while True:
            try:
                found = await self.drains.resume()
            except StateError as exc:
                log.warning("api: cannot read drains to resume their ttls yet: %s", exc)
                await asyncio.sleep(self.config.follow_interval)
                continue
            if found:
                log.info("api: took over the ttls of %d drains", found)
            return

    async def _drive_rollouts(self) -> None:
        """Judge the running rollouts every ``ROLLOUT_TICK_S`` (one API instance at a time:
        ``RolloutController.tick``); a state error waits for the next tick."""
        while True:
            try:
                await self.rollouts.tick()  # also what the metrics show, whoever drives them
            except StateError as exc:
                log.warning("api: rollouts not judged this time: %s", exc)
            except Exception:
                log.exception("api: rollouts not judged this time")
            await asyncio.sleep(ROLLOUT_TICK_S)

    async def stop(self) -> None:
        # re-cancels if redis-py swallows one
        await cancel_and_wait([self._follower, self._drain_resumer, self._rollout_loop])
        with contextlib.suppress(StateError):
            await self.rollouts.release()
        await self.usage_log.stop()
        await self.fault_timers.close(run_pending=True)  # no drill outlives its API
        await self.drain_timers.close(run_pending=False)
        await self.refresher.stop()
        if self._http is not None:
            await self._http.close()
        await self.store.close()
        self.sync_store.close()
        self.locator.close()

    async def status(self) -> dict[str, Any]:
        """The status document; answers from the last known snapshot when Redis is down."""
        active = self.active
        instances: list[Instance] = []
        try:
            facts = await read_gpu_facts(self.store, active.policy)
            instances = await self.store.instances()
        except StateError as exc:
            log.debug("api: status without fresh GPU state: %s", exc)
            facts = None
        snapshot = self.refresher.current
        samples = sample_decisions(active.policy, active.engine, snapshot, self.locator)
        inputs = StatusInputs(active.policy, active.version, active.document.name, snapshot,
                              facts, self.config.dns_listen, self.config.balancer_port,
                              tuple(instances))
        return build_status(inputs, samples)
