# SPDX-License-Identifier: Apache-2.0
"""The balancer's link to the shared state (Redis / Valkey): publish load, follow flags.

Three background tasks, none on the request path:

- **publish**: every ``publish_every_s`` the region's ``RegionLoad`` (see ``load_report``)
  as this balancer sees it is written with ``AsyncStateStore.write_region_load`` for the
  global tier's spillover, as this balancer's record beside the region's other balancers'
  (``state.region_load``: readers add them up), and the answer counts of declared
  revisions (``http.revision_outcomes``) when they changed;
- **read**: every ``read_every_s``, and at once when the change channel names a key it
  follows, one pipelined read of the drain flags (and of its GPU servers' probe health when
  ``follow_health``, and their scraped load when ``follow_load``) is applied to the pool. A
  GPU drained in the state gets no new requests while its in-flight ones finish; an
  undrain returns it. This drain is held under the ``"state"`` source, apart from the
  loopback admin endpoint's (``"admin"``);
- **listen**: subscribes to the change channel; after a reconnect it reads everything
  again, since messages sent meanwhile are lost.

Versions: the version probe's record of a GPU server (``workers.probes.versions``) names the
models it is refused for (a fingerprint that differs from the policy's, a mixed pool); the
pool stops sending it those models, and sends them again once the record clears or is older
than ``stale_after_s``.

Health: a probe record (rise/fall applied by the workers) that says down takes the GPU out
of the candidates; one older than ``stale_after_s`` is no longer believed and the GPU counts
as healthy again (data-path retries and outlier ejection still guard it), so dead probes
never keep a GPU out for good. A region-level drain flag is left to the DNS tier, which
stops sending clients; requests that still arrive are served.

Scraped load: the workers write each GPU server's ``waiting``, ``running`` and KV-cache usage
(``GpuLoad``, every 2 s by default, not announced on the change channel, so it arrives with
the periodic read). A record older than ``load_stale_after_s`` is not believed: the pool's
values become unknown (None), also while the state server is unreachable, so scorers fall
back to neutral rather than steer on old numbers.

Fail-static: a state error never reaches a request. It is logged when the server becomes
unreachable and again when it is back, counted (``director_balancer_state_errors_total``),
and the last known flags stay applied until a read succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from regions.balancer.errors import BalancerConfigError
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.revision_choice import ChooseRevision
from regions.balancer.http.revision_outcomes import RevisionOutcomes
from regions.balancer.scheduling.backend import ScrapedLoad
from regions.balancer.scheduling.backends import STATE, BackendPool
from regions.balancer.scheduling.revision_split import RevisionSplit
from state.aio import AsyncStateStore
from state.changes import listen_for_changes
from state.errors import RecordError, StateError
from state.instances import Heartbeat, Instance, this_process
from state.keys import DEFAULT_PREFIX
from state.records import DrainFlags, GpuLoad, HealthRecord, RegionLoad, VersionRecord
from state.region_load import pool_digest
from state.tasks import cancel_and_wait
from tenants.quota_link import DEFAULT_TIMEOUT_S

log = logging.getLogger(__name__)

_RECONNECT_MIN_S = 0.1
_RECONNECT_MAX_S = 2.0
FORGET_EVERY = 60  # publishes between sweeps of the region's records of gone balancers


@dataclass(frozen=True)
class SharedStateConfig:
    """Where the shared state is and how often the balancer talks to it."""

    url: str
    prefix: str = DEFAULT_PREFIX
    publish_every_s: float = 1.0
    read_every_s: float = 1.0
    stale_after_s: float = 30.0
    follow_health: bool = True
    timeout_s: float = 1.0
    follow_load: bool = True
    load_stale_after_s: float = 5.0
    key_table_file: Path | None = None  # the tenant key table's local copy (api_keys)
    # the least a request waits for the shared quota before the balancer decides it by its
    # local limits; the wait adapts to measured round trips, up to QUOTA_MAX_WAIT_S
    quota_wait_s: float = DEFAULT_TIMEOUT_S
    listen: str = ""  # where this balancer serves, for its heartbeat (state.instances)


class StateLink:
    """Publishes one region's load and applies the state's drain and health flags."""

    def __init__(
        self,
        store: AsyncStateStore,
        region: str,
        pool: BackendPool,
        measure: Callable[[], RegionLoad],
        config: SharedStateConfig,
        metrics: BalancerMetrics,
        *,
        wall_clock: Callable[[], float] = time.time,
        outcomes: RevisionOutcomes | None = None,
        revisions: ChooseRevision | None = None,
        instance: Instance | None = None,
    ) -> None:
        self.store = store
        self.region = region
        self.pool = pool
        self.measure = measure
        self.config = config
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.outcomes = outcomes
        self.revisions = revisions
        self._split_key = store.keys.split(region)
        self._split_raw: dict[bytes, bytes] | None = None
        self.reachable: bool | None = None
        self.drains = DrainFlags()
        self.published: RegionLoad | None = None
        # named in the region's load hash by its instance, beside the region's other
        # balancers (state.region_load)
        self.instance = instance or this_process("balancer", config.listen, region)
        self._pool_digest = pool_digest(b.name for b in pool)  # a relink follows a change
        self._publishes = 0
        self._health_keys = (
            {self.store.keys.gpu_health(region, b.name): b.name for b in pool}
            if config.follow_health
            else {}
        )
        self._version_keys = (
            {self.store.keys.gpu_version(region, b.name): b.name for b in pool}
            if config.follow_health
            else {}
        )
        self._load_keys = (
            {self.store.keys.gpu_load(region, b.name): b.name for b in pool}
            if config.follow_load
            else {}
        )
        self.loads: dict[str, GpuLoad] = {}
        self._followed = {self.store.keys.drain, *self._health_keys, *self._version_keys,
                          self._split_key}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Read the flags once (best effort, bounded by the timeout), then run in the
        background."""
        if self._tasks:
            return
        await self.read()
        self._tasks = [
            asyncio.create_task(self._publish_loop(), name=f"state-publish-{self.region}"),
            asyncio.create_task(self._read_loop(), name=f"state-read-{self.region}"),
            asyncio.create_task(self._listen(), name=f"state-listen-{self.region}"),
        ]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)

    # -- one round each ------------------------------------------------------------------

    async def publish(self) -> bool:
        """Write the region's load now; False (logged, counted) if the state failed."""
        load = self.measure()
        outcomes = self.outcomes
        try:
            await self.store.write_region_load(self.region, load, source=self.instance.name,
                                               pool=self._pool_digest)
            if self._publishes % FORGET_EVERY == 0:
                await self.store.forget_stale_loads(self.region, self.wall_clock())
            self._publishes += 1
            if outcomes is not None and outcomes.changed:
                outcomes.changed = False
                await self.store.write_outcomes(self.region, outcomes.fields())
        except StateError as exc:
            if outcomes is not None:
                outcomes.changed = True  # try again with the next round
            self._failed("publish", exc)
            return False
        self.published = load
        self._ok()
        return True

    async def read(self) -> bool:
        """Read the flags now and apply them; False (last known flags kept) on failure."""
        keys = [self.store.keys.drain, *self._health_keys, *self._version_keys,
                *self._load_keys, self._split_key]
        try:
            fetched = await self.store.fetch(keys)
        except StateError as exc:
            self._failed("read", exc)
            self._apply_loads(self.wall_clock())  # the last known loads still age out
            return False
        self._ok()
        self._apply_drains(DrainFlags.from_fields(fetched.get(self.store.keys.drain, {})))
        now = self.wall_clock()
        for key, gpu in self._health_keys.items():
            raw = fetched.get(key)
            if raw:
                try:
                    self._apply_health(gpu, HealthRecord.from_fields(raw), now)
                except RecordError as exc:
                    log.warning("state: ignoring malformed record %s: %s", key, exc)
        for key, gpu in self._version_keys.items():
            raw = fetched.get(key)
            try:
                record = VersionRecord.from_fields(raw) if raw else None
            except RecordError as exc:
                log.warning("state: ignoring malformed record %s: %s", key, exc)
                continue
            self._apply_versions(gpu, record, now)
        self._read_loads(fetched)
        self._apply_loads(now)
        self._apply_splits(fetched.get(self._split_key, {}))
        return True

    def _apply_splits(self, raw: dict[bytes, bytes]) -> None:
        """A rollout's splits of this region (``Keys.split``), in place of the policy's;
        a malformed one is left out and logged, the others apply."""
        if self.revisions is None or raw == self._split_raw:
            return
        self._split_raw = dict(raw)
        splits: dict[str, RevisionSplit] = {}
        for field, value in raw.items():
            model = field.decode() if isinstance(field, bytes) else field
            try:
                weights = tuple((str(r), float(p)) for r, p in json.loads(value))
                splits[model] = RevisionSplit(model, weights)
            except (ValueError, TypeError, BalancerConfigError) as exc:
                log.warning("state: ignoring the stored split of %s: %s", model, exc)
        for problem in self.revisions.set_overrides(splits):
            log.warning("state: %s", problem)
        log.info("state: rollout splits %s", {m: s.weights for m, s in splits.items()} or "none")

    def _apply_versions(self, gpu: str, record: VersionRecord | None, now: float) -> None:
        """The models the version probe refuses ``gpu`` for; none once its record is older
        than ``stale_after_s`` (dead probes must not keep a model away for good)."""
        refused = ({} if record is None or record.age(now) > self.config.stale_after_s
                   else record.refused)
        if self.pool.set_refused(gpu, refused):
            log.warning("state: GPU %s/%s refused for %s", self.region, gpu,
                        ", ".join(f"{m} ({why})" for m, why in refused.items()) or "nothing")

    def _apply_drains(self, flags: DrainFlags) -> None:
        self.drains = flags
        for b in self.pool:
            want = (self.region, b.name) in flags.gpus
            if want != (STATE in b.drains):
                log.info(
                    "state: GPU %s/%s %s", self.region, b.name, "drained" if want else "undrained"
                )
                self.pool.set_draining(b.name, want, STATE)

    def _apply_health(self, gpu: str, record: HealthRecord, now: float) -> None:
        if record.up is None:
            return
        healthy = record.up or record.age(now) > self.config.stale_after_s
        if healthy != self.pool[gpu].healthy:
            log.info("state: GPU %s/%s %s", self.region, gpu, "up" if healthy else "down")
            self.pool.set_healthy(gpu, healthy)

    def _read_loads(self, fetched: dict[str, dict[bytes, bytes]]) -> None:
        loads: dict[str, GpuLoad] = {}
        for key, gpu in self._load_keys.items():
            raw = fetched.get(key)
            if raw:
                try:
                    loads[gpu] = GpuLoad.from_fields(raw)
                except RecordError as exc:
                    log.warning("state: ignoring malformed record %s: %s", key, exc)
        self.loads = loads

    def _apply_loads(self, now: float) -> None:
        for gpu in self._load_keys.values():
            if gpu not in self.pool.by_name:  # left the pool; the link is rebuilt soon
                continue
            load = self.loads.get(gpu)
            if load is None or load.age(now) > self.config.load_stale_after_s:
                self.pool.set_scraped(gpu, ScrapedLoad())
            else:
                self.pool.set_scraped(
                    gpu, ScrapedLoad(load.waiting, load.running, load.cache_usage)
                )

    # -- loops ---------------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        heartbeat = Heartbeat(self.instance, self.store.heartbeat)
        while True:
            if await self.publish():
                await heartbeat.beat()
            await asyncio.sleep(self.config.publish_every_s)

    async def _read_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.read_every_s)
            self._wake.clear()
            await self.read()

    async def _listen(self) -> None:
        def on_key(key: str) -> None:
            if key in self._followed:
                self._wake.set()

        await listen_for_changes(self.store, on_key,
                                 on_subscribed=self._wake.set,  # catch up on what we missed
                                 on_error=lambda exc: self._failed("listen", exc),
                                 min_delay=_RECONNECT_MIN_S, max_delay=_RECONNECT_MAX_S)

    # -- reachability --------------------------------------------------------------------

    def _failed(self, op: str, exc: BaseException) -> None:
        self.metrics.state_errors.labels(op).inc()
        if self.reachable is not False:
            log.warning(
                "state: server unreachable (%s), serving on with the last known "
                "drain and health flags: %s",
                op,
                exc,
            )
        self.reachable = False
        self.metrics.state_reachable.set(0)

    def _ok(self) -> None:
        if self.reachable is False:
            log.info("state: server reachable again")
        self.reachable = True
        self.metrics.state_reachable.set(1)
