"""Keeps an immutable :class:`Snapshot` fresh for the global tier, off its hot path.

A background asyncio task listens on the state's change channel (writers publish the key they
changed) and re-reads just those keys, and re-reads every key of the policy every
``full_read_every`` seconds as a safety net (missed messages, ageing records, reconnects).
Each change builds a new snapshot (``version`` + 1) and swaps a reference; consumers read
:attr:`SnapshotRefresher.current`, which does no I/O and never blocks.

Fail-static: when the state server is unreachable, or probes stop writing, the last known
records are kept; once a region's records are older than ``policy.stale_after`` it is marked
``stale`` (logged, and exported as ``director_state_region_stale``) but keeps its last known
health, utilization and drain state indefinitely; data going missing never marks a region
down. Operators see staleness in metrics and ``explain``; only a real probe result changes
health. See :mod:`director.refresh.derive` for how region state is derived.

::

    async with SnapshotRefresher(AsyncStateStore.from_url(url), policy) as refresher:
        snapshot = refresher.current
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from types import TracebackType

from director.engine.snapshot import Snapshot
from director.refresh.derive import build_snapshot, same_state
from director.refresh.metrics import RefresherMetrics
from policies.model import Policy
from state.aio import AsyncStateStore
from state.changes import listen_for_changes
from state.errors import StateError
from state.instances import Heartbeat, Instance
from state.tasks import cancel_and_wait
from state.view import StateView, snapshot_keys

log = logging.getLogger(__name__)

_RECONNECT_MIN = 0.1
_RECONNECT_MAX = 2.0


class SnapshotRefresher:
    """Background reader of the shared state; ``current`` is the latest snapshot."""

    def __init__(
        self,
        store: AsyncStateStore,
        policy: Policy,
        *,
        full_read_every: float | None = None,
        metrics: RefresherMetrics | None = None,
        clock: Callable[[], float] = time.time,
        heartbeat: Instance | None = None,
    ) -> None:
        self.store = store
        # this process, announced after full reads
        self._heartbeat = Heartbeat(heartbeat, store.heartbeat) if heartbeat else None
        self.metrics = metrics or RefresherMetrics()
        self._policy = policy
        self._full_read_every = full_read_every or max(0.25, min(2.0, policy.stale_after / 5))
        self._clock = clock
        self._view = StateView()
        self._current = Snapshot()
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._swapped = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._stale: frozenset[str] = frozenset()
        self._reachable: bool | None = None

    @property
    def current(self) -> Snapshot:
        """The latest snapshot: no I/O, no lock, never awaits."""
        return self._current

    @property
    def policy(self) -> Policy:
        return self._policy

    def set_policy(self, policy: Policy) -> None:
        """Follow a new policy: its targets are read at once, removed ones forgotten."""
        self._policy = policy
        self._view.prune(policy)
        self._pending.update(snapshot_keys(self.store.keys, policy))
        self._wake.set()

    async def start(self) -> SnapshotRefresher:
        """Read everything once (best effort), then keep reading in the background."""
        if self._tasks:
            return self
        await self.refresh()
        self._tasks = [
            asyncio.create_task(self._listen(), name="state-refresher-listen"),
            asyncio.create_task(self._run(), name="state-refresher-run"),
        ]
        return self

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_and_wait(tasks)

    async def __aenter__(self) -> SnapshotRefresher:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def refresh(self, keys: list[str] | None = None) -> Snapshot:
        """Read ``keys`` (default: all of the policy's), rebuild, swap if anything changed."""
        asked = keys if keys is not None else snapshot_keys(self.store.keys, self._policy)
        try:
            fetched = await self.store.fetch(asked)
        except StateError as exc:
            self._set_reachable(False, exc)
        else:
            self._set_reachable(True)
            self._view.apply(self.store.keys, fetched, asked)
        await self._rebuild()
        return self._current

    async def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float) -> Snapshot:
        """Wait until a swapped-in snapshot satisfies ``predicate`` (tests and benchmarks)."""
        async with self._swapped:
            await asyncio.wait_for(
                self._swapped.wait_for(lambda: predicate(self._current)), timeout
            )
        return self._current

    async def _run(self) -> None:
        next_full = time.monotonic() + self._full_read_every
        while True:
            timeout = max(0.0, next_full - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            if time.monotonic() >= next_full:
                self._pending.clear()
                await self.refresh()
                next_full = time.monotonic() + self._full_read_every
                if self._heartbeat is not None:
                    await self._heartbeat.beat()
            elif self._pending:
                keys, self._pending = sorted(self._pending), set()
                await self.refresh(keys)

    async def _listen(self) -> None:
        def on_key(key: str) -> None:
            self._pending.add(key)
            self._wake.set()

        def on_subscribed() -> None:  # messages sent while we were away are lost: read all
            self._pending.update(snapshot_keys(self.store.keys, self._policy))
            self._wake.set()

        await listen_for_changes(self.store, on_key, on_subscribed=on_subscribed,
                                 on_error=lambda exc: self._set_reachable(False, exc),
                                 min_delay=_RECONNECT_MIN, max_delay=_RECONNECT_MAX)

    async def _rebuild(self) -> None:
        snapshot, ages = build_snapshot(
            self._policy, self._view, now=self._clock(), version=self._current.version + 1
        )
        for age in ages:
            if age.age is not None:
                self.metrics.region_age.labels(age.region).set(age.age)
        self._note_staleness(snapshot)
        if same_state(snapshot, self._current) and self._current.version:
            return
        async with self._swapped:
            self._current = snapshot
            self.metrics.version.set(snapshot.version)
            self._swapped.notify_all()

    def _note_staleness(self, snapshot: Snapshot) -> None:
        stale = frozenset(name for name, state in snapshot.regions.items() if state.stale)
        for name in sorted(stale - self._stale):
            log.warning(
                "state: region %s is stale (no fresh data for %.0fs): keeping last known state",
                name,
                self._policy.stale_after,
            )
        for name in sorted(self._stale - stale):
            log.info("state: region %s is fresh again", name)
        for name in snapshot.regions:
            self.metrics.region_stale.labels(name).set(1 if name in stale else 0)
        self.metrics.stale_regions.set(len(stale))
        self._stale = stale

    def _set_reachable(self, reachable: bool, exc: BaseException | None = None) -> None:
        if not reachable:
            self.metrics.read_errors.inc()
        if reachable != self._reachable:
            if reachable:
                log.info("state: server reachable")
            else:
                log.warning("state: server unreachable, serving last known state: %s", exc)
        self._reachable = reachable
        self.metrics.reachable.set(1 if reachable else 0)
