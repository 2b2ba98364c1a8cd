"""Follow the active policy stored in Redis: every instance answers from the same version.

``PolicyFollower`` reads the policy record's version when the change channel says the
policy was written (``StateStore.set_policy`` publishes it), and once a second in any case
(messages are lost while disconnected); when it changes it loads the new text with ``load``
(the policy gate, ``director.policy_gate.load_record``, which the composition point passes
in), off the event loop, and hands the policy to ``on_policy``. A version that fails to
load is logged and remembered, so it is not retried, and the last good policy keeps
serving; so does an unreachable Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from types import TracebackType

from policies import PolicyError
from policies.model import Policy
from state.aio import AsyncStateStore
from state.changes import listen_for_changes
from state.errors import StateError
from state.guard import describe, redis_errors
from state.records import PolicyRecord
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
_RECONNECT_MAX = 5.0  # seconds between attempts to resubscribe, at most


RecordLoader = Callable[[PolicyRecord], Policy]  # raises PolicyError when it does not load


class StoredVersions:
    """Which stored policy version is in use and which one was refused, so that each stored
    version is loaded at most once (with ``load``, the policy gate)."""

    def __init__(self, load: RecordLoader, version: int | None = None) -> None:
        self.load = load
        self.version = version  # the version now serving (None: the local file)
        self.rejected: int | None = None  # the last version that failed to load

    def wanted(self, version: int | None) -> bool:
        return version is not None and version not in (self.version, self.rejected)

    def adopt(self, record: PolicyRecord) -> Policy | None:
        """The record's policy when its version is new and loads; else None (a failure is
        logged and remembered)."""
        if not self.wanted(record.version):
            return None
        try:
            policy = self.load(record)
        except PolicyError as exc:
            self.rejected = record.version
            log.error("stored policy version %d rejected, keeping version %s:\n%s",
                      record.version, self.version, exc.render())
            return None
        self.version = record.version
        log.info("stored policy version %d now active", record.version)
        return policy


class PolicyFollower:
    """Background poller of the stored policy; an async context manager."""

    def __init__(
        self,
        store: AsyncStateStore,
        on_policy: Callable[[Policy, int], object],
        *,
        load: RecordLoader,
        version: int | None = None,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.store = store
        self.on_policy = on_policy
        self.interval = interval
        self.versions = StoredVersions(load, version)
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()

    @property
    def version(self) -> int | None:
        return self.versions.version

    @property
    def rejected(self) -> int | None:
        return self.versions.rejected

    async def check(self) -> int | None:
        """Look once; returns the version swapped in, or None when nothing changed."""
        try:
            if not self.versions.wanted(await self._stored_version()):
                return None
            record = await self.store.policy()
        except StateError as exc:
            log.debug("policy follower: state unavailable: %s", exc)
            return None
        if record is None:
            return None
        policy = await asyncio.to_thread(self.versions.adopt, record)
        if policy is None:
            return None
        self.on_policy(policy, record.version)
        return record.version

    async def _stored_version(self) -> int | None:
        with redis_errors(describe(self.store.client)):
            raw = await self.store.client.hget(self.store.keys.policy, "version")
        return int(raw) if raw is not None else None

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)

    async def _listen(self) -> None:
        """Wake ``_run`` whenever the change channel names the policy key."""
        policy_key = self.store.keys.policy

        def on_key(key: str) -> None:
            if key == policy_key:
                self._wake.set()

        def on_error(exc: Exception) -> None:  # the poll goes on meanwhile
            log.debug("policy follower: change channel unavailable: %s", exc)

        await listen_for_changes(self.store, on_key, on_subscribed=self._wake.set,
                                 on_error=on_error, max_delay=_RECONNECT_MAX)

    async def __aenter__(self) -> PolicyFollower:
        self._tasks = [asyncio.create_task(self._run(), name="policy-follower"),
                       asyncio.create_task(self._listen(), name="policy-follower-listen")]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await cancel_and_wait(self._tasks)
