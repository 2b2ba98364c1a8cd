# SPDX-License-Identifier: Apache-2.0
"""A balancer following the policy stored in Redis: its region's GPU servers, live.

``PolicyFollow(balancer, follow)`` runs a ``state.policy_follower.PolicyFollower``
(one small read a ``read_every_s``; a version that fails to load is logged once and the
last good one keeps serving; an older one than it serves is refused, so a store that lost
its data never rolls the balancer back) and applies each new version with ``apply``:

- the region's GPU servers go through ``pool_update.apply_specs``: new ones join in slow
  start, removed ones drain (their streams finish) and leave once idle, changed URLs are
  replaced, changed models apply in place; a version without this region or without GPU
  servers for it is logged and changes nothing;
- new backends get their connection pool; the shared-state link is rebuilt so it follows
  the drain and health flags of the GPU servers now in the pool;
- the residency re-check, the overflow siblings, the published capacity and the region's
  splits of models over revisions follow too.

A background task takes retired backends out of the pool once their last stream ended
(checked every ``RETIRE_POLL_S`` while any retire) and closes their connection pools.

``served`` is the policy in force (a stored version, or the local file it started from),
which ``/healthz`` and ``director_policy_info`` report.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from policies.model import Policy
from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.connections import BackendConnections, ConnectionPool
from regions.balancer.http.revision_choice import ChooseRevision
from regions.balancer.scheduling.backend import Backend, BackendSpec
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.revision_split import RevisionSplit
from regions.balancer.signals.overflow import Overflow
from regions.balancer.signals.pool_update import (
    PoolChange,
    apply_specs,
    idle_retired,
    remove,
    retiring,
)
from regions.balancer.signals.shared_state import SharedStateConfig
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.tenancy.residency_check import ResidencyCheck
from state.aio import AsyncStateStore
from state.policy_follower import PolicyFollower, RecordLoader
from state.policy_identity import PolicyIdentity
from state.tasks import cancel_and_wait


class _PinsCapacity(Protocol):
    @property
    def max_concurrency(self) -> int | None: ...


class FollowedBalancer(Protocol):
    """What following a policy reads and replaces on a balancer (``app.Balancer``)."""

    capacity_rps: float | None
    jurisdiction: str | None
    residency: ResidencyCheck | None

    @property
    def region(self) -> str: ...
    @property
    def tenancy(self) -> Tenancy: ...
    @property
    def config(self) -> _PinsCapacity: ...
    @property
    def pool(self) -> BackendPool: ...
    @property
    def connections(self) -> BackendConnections: ...
    @property
    def runner(self) -> object | None: ...
    @property
    def overflow(self) -> Overflow | None: ...
    @property
    def revisions(self) -> ChooseRevision: ...
    def declare_adapters(self, region: Any, specs: list[BackendSpec]) -> None: ...

    async def relink(self, mutate: Callable[[], None] | None = None) -> None: ...


log = logging.getLogger(__name__)

RETIRE_POLL_S = 0.05


@dataclass(frozen=True)
class FollowPolicy:
    """Where the stored policy is (None: nowhere, the balancer serves its file), the gate
    each version passes before it is applied (``director.policy_gate.load_record``, passed
    in by the composition point) and the local file's identity (``initial``)."""

    state: SharedStateConfig | None
    load: RecordLoader
    initial: PolicyIdentity | None = None


class PolicyFollow:
    """Applies stored policy versions to one running balancer."""

    def __init__(
        self, balancer: FollowedBalancer, follow: FollowPolicy | None = None
    ) -> None:
        self.balancer = balancer
        self.follow = follow
        self.follower: PolicyFollower | None = None
        self.version: int | None = None
        self.served: PolicyIdentity | None = follow.initial if follow is not None else None
        self._tasks: set[asyncio.Task[None]] = set()
        self._retire_task: asyncio.Task[None] | None = None

    @property
    def following(self) -> bool:
        return self.follow is not None and self.follow.state is not None

    @property
    def refused(self) -> int:
        """Stored versions refused as older than the one served."""
        return self.follower.refused if self.follower is not None else 0

    def describe(self) -> dict[str, object]:
        """The policy in force, for ``/healthz``."""
        served = self.served
        return {"version": served.version if served else None,
                "digest": served.digest if served else None,
                "epoch": served.epoch if served else None,
                "following": self.following, "refused": self.refused}

    async def start(self) -> None:
        if self.follow is None or self.follow.state is None or self.follower is not None:
            return
        cfg = self.follow.state
        store = AsyncStateStore.from_url(cfg.url, prefix=cfg.prefix, timeout=cfg.timeout_s)
        self.follower = PolicyFollower(store, self._apply_stored, load=self.follow.load,
                                       initial=self.follow.initial, interval=cfg.read_every_s)
        await self.follower.__aenter__()

    async def stop(self) -> None:
        follower, self.follower = self.follower, None
        if follower is not None:
            await follower.__aexit__(None, None, None)
            await follower.store.close()
        tasks, self._tasks = [*self._tasks, self._retire_task], set()
        self._retire_task = None
        await cancel_and_wait(tasks)

    # -- applying ------------------------------------------------------------------------

    def _apply_stored(self, policy: Policy, version: int) -> None:
        if self.apply(policy, version) is not None and self.follower is not None:
            self.served = self.follower.served

    def apply(self, policy: Policy, version: int | None = None) -> PoolChange | None:
        """Serve ``policy``'s GPU servers for this region; None when it cannot (logged).
        Runs on the balancer's event loop (it may start background tasks)."""
        b = self.balancer
        b.tenancy.apply_policy(policy)
        try:
            region = policy.region(b.region)
        except KeyError:
            log.error(
                "policy version %s has no region %s; keeping its current GPU servers",
                version,
                b.region,
            )
            return None
        specs = [BackendSpec.coerce(gpu, b.config.max_concurrency) for gpu in region.gpus]
        try:
            change = apply_specs(b.pool, specs)
        except BalancerConfigError as exc:
            log.error(
                "policy version %s: region %s: %s; keeping its current GPU servers",
                version,
                b.region,
                exc,
            )
            return None
        self.version = version
        for name, retired in change.renamed:
            b.connections.rename(name, retired)
        if b.runner is not None:  # else the app opens them when it starts
            b.connections.open(b.pool)
        b.capacity_rps = region.capacity.rps
        b.jurisdiction = region.jurisdiction
        b.revisions.splits = {model: RevisionSplit(model, weights)
                              for model, weights in region.splits}
        b.declare_adapters(region, specs)
        if b.residency is not None:
            old = b.residency
            b.residency = ResidencyCheck(
                policy, b.region, old.locate, [str(n) for n in old.trusted]
            )
            if b.overflow is not None:
                b.overflow.set_residency(b.residency)
        if change:
            log.info("policy version %s: region %s: %s", version, b.region, change.describe())
        if change.added or change.replaced:
            self._spawn(b.relink())
        if retiring(b.pool):
            self._watch_retiring()
        return change

    def _leave(
        self, backend: Backend, left: list[tuple[str, list[ConnectionPool]]]
    ) -> None:
        """Take an idle retired backend out (unless it rejoined meanwhile), with its pools."""
        b = self.balancer
        if any(x is backend for x in idle_retired(b.pool)):
            remove(b.pool, backend)
            left.append((backend.name, b.connections.take(backend.name)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _watch_retiring(self) -> None:
        if self._retire_task is None or self._retire_task.done():
            self._retire_task = asyncio.create_task(self._retire(), name="retire-backends")

    async def _retire(self) -> None:
        b = self.balancer
        while retiring(b.pool):
            for backend in idle_retired(b.pool):
                left: list[tuple[str, list[ConnectionPool]]] = []
                await b.relink(functools.partial(self._leave, backend, left))
                for name, pools in left:
                    for pool in pools:
                        await pool.close()
                    log.info("region %s: GPU server %s drained and removed", b.region, name)
            await asyncio.sleep(RETIRE_POLL_S)
