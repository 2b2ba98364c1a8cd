"""Follow the active policy stored in Redis: every instance answers from the same version.

``PolicyFollower`` reads the policy record's version and digest when the change channel
says the policy was written (``StateStore.set_policy`` publishes it), and once a second in
any case (messages are lost while disconnected); when a newer version is stored it loads the
new text with ``load`` (the policy gate, ``director.policy_gate.load_record``, which the
composition point passes in), off the event loop, and hands the policy to ``on_policy``. A
version that fails to load is logged and remembered, so it is not retried, and the last good
policy keeps serving; so does an unreachable Redis.

Followers only move forward (``state.policy_identity.compare``): a stored version lower than
the one served, or the same number with other sources, is what a store that lost its data
holds; it is refused (logged once, counted in ``refused``) and the served one stays, until
the admin API stores the newest version again or a newer one is stored.
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
from state.policy_identity import Order, PolicyIdentity, compare, parse_version
from state.records import PolicyRecord
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0
_RECONNECT_MAX = 5.0  # seconds between attempts to resubscribe, at most


RecordLoader = Callable[[PolicyRecord], Policy]  # raises PolicyError when it does not load


class StoredVersions:
    """Which stored policy is in use and which were refused, so that each stored version is
    loaded at most once (with ``load``, the policy gate) and none older is ever taken.

    ``served`` starts as ``initial`` (the local file, version None), or None."""

    def __init__(self, load: RecordLoader, initial: PolicyIdentity | None = None) -> None:
        self.load = load
        self.served: PolicyIdentity | None = initial
        self.rejected: int | None = None  # the last version that failed to load
        self._rejected_digest: str | None = None
        self.refused = 0  # stored versions refused as older than the one served
        self._refused_seen: tuple[int, str | None] | None = None

    @property
    def version(self) -> int | None:
        """The stored version now serving (None: the local file)."""
        return None if self.served is None else self.served.version

    def wanted(self, version: int | None, digest: str | None = None) -> bool:
        """Whether the stored ``version`` (with ``digest``, when known) is worth loading:
        newer than the one served and not already refused. Logs an older one, once."""
        if version is None:
            return False
        if (version, digest) == (self.rejected, self._rejected_digest) or (
                digest is None and version == self.rejected):
            return False
        order = compare(self.served, version, digest)
        if order in (Order.OLDER, Order.CONFLICT):
            self._refuse(order, version, digest)
        return order is Order.NEWER

    def _refuse(self, order: Order, version: int, digest: str | None) -> None:
        if self._refused_seen == (version, digest):
            return
        self._refused_seen = (version, digest)
        self.refused += 1
        stored = f"version {version}" + (f" ({digest[:12]})" if digest else "")
        why = ("is older than" if order is Order.OLDER
               else "holds other sources under the number of")
        log.error("stored policy %s %s the %s served here: refused, never rolled back (the "
                  "store lost its data or was restored from a backup; the admin API stores "
                  "its newest version again)", stored, why, self._describe_served())

    def adopt(self, record: PolicyRecord) -> Policy | None:
        """The record's policy when its version is newer and loads; else None (a failure is
        logged and remembered)."""
        identity = record.identity
        if not self.wanted(record.version, identity.digest):
            return None
        try:
            policy = self.load(record)
        except PolicyError as exc:
            self.rejected, self._rejected_digest = record.version, identity.digest
            log.error("stored policy version %d rejected, keeping %s:\n%s",
                      record.version, self._describe_served(), exc.render())
            return None
        self.served = identity
        log.info("stored policy version %d (%s, epoch %s) now active", record.version,
                 identity.digest[:12], identity.epoch or "-")
        return policy

    def _describe_served(self) -> str:
        return "the local file" if self.served is None else self.served.describe()


class PolicyFollower:
    """Background poller of the stored policy; an async context manager."""

    def __init__(
        self,
        store: AsyncStateStore,
        on_policy: Callable[[Policy, int], object],
        *,
        load: RecordLoader,
        initial: PolicyIdentity | None = None,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        self.store = store
        self.on_policy = on_policy
        self.interval = interval
        self.versions = StoredVersions(load, initial)
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()

    @property
    def version(self) -> int | None:
        return self.versions.version

    @property
    def rejected(self) -> int | None:
        return self.versions.rejected

    @property
    def served(self) -> PolicyIdentity | None:
        """The policy served: a stored version, or the local file given as ``initial``."""
        return self.versions.served

    @property
    def refused(self) -> int:
        """How many stored versions were refused as older than the one served."""
        return self.versions.refused

    async def check(self) -> int | None:
        """Look once; returns the version swapped in, or None when nothing changed."""
        try:
            if not self.versions.wanted(*await self._stored_version()):
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

    async def _stored_version(self) -> tuple[int | None, str | None]:
        """The stored version and digest (None: not stored), two fields of the record."""
        with redis_errors(describe(self.store.client)):
            version, digest = await self.store.client.hmget(self.store.keys.policy,
                                                            ["version", "digest"])
        if isinstance(digest, bytes):
            digest = digest.decode()
        return parse_version(version), digest or None

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
