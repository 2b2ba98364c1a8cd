"""The active policy of this API instance, replaced atomically and only by a good one.

``PolicyHolder.replace`` (``PUT /api/v1/policy``): load through the policy gate
(``director.policy_gate``: both residency proofs and the lint) off the event loop, within
``deadline_s`` (a policy whose check runs longer is refused, 422, and the lock is given back
at that deadline even if a proof under way has not reached its next check), write the
files to the store directory under temporary names, store the policy in Redis (which assigns
the version, checking the writer's ``If-Match`` expectation there, in the same step), link
the files to that version, then swap the reference. Any failure before the Redis write
leaves everything as it was: the last good policy keeps serving.

Versions never go back (``state.policy_identity``): the holder numbers every write above the
highest version it has seen (in Redis, on disk, served), so a store that lost its data
continues after the fleet's version. ``PolicyHolder.sync`` follows a newer version another
instance (or ``director up``) stored (a version that fails to load is logged and skipped);
stores ours when Redis holds none; and stores ours again, above what Redis holds, when
Redis holds an older version or another policy under our number (Redis lost its data, or
was restored from an old backup), so the followers, which never roll back, move on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from director.api.config import PolicyDocument
from director.api.errors import ApiError, PolicyRejected
from director.api.policy_disk import PolicyDisk
from director.api.policy_etag import Expected, etag
from director.engine import Engine
from policies import Diagnostic, Policy
from state import PolicyRecord, StateStore
from state.durability import NOT_ASKED, Durability
from state.errors import PolicyVersionMismatch
from state.policy_identity import Order, PolicyIdentity, compare, policy_digest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActivePolicy:
    """One loaded policy, its source and version (0: not stored in Redis yet)."""

    document: PolicyDocument
    policy: Policy
    version: int
    engine: Engine
    warnings: tuple[Diagnostic, ...] = ()  # the lint's, from the policy gate
    proofs: tuple[str, ...] = ()  # digests of the engine proofs that passed, stored with it
    epoch: str = ""  # of the Redis record it was stored in or read from
    durability: Durability = NOT_ASKED  # of the write that stored it (``replace``)

    @functools.cached_property
    def digest(self) -> str:
        doc = self.document
        return policy_digest(doc.name, doc.text, doc.files)

    @property
    def identity(self) -> PolicyIdentity:
        return PolicyIdentity(self.version or None, self.digest, self.epoch)


class PersistError(ApiError):
    status = 500


class StaleVersion(ApiError):
    """``If-Match`` named a version that is no longer the stored one."""

    status = 412


SwapListener = Callable[[ActivePolicy], None]


class PolicyHolder:
    """Holds the active policy; ``current`` is a plain reference read (no I/O).

    ``version`` is the stored version ``document`` is (the newest on disk the API starts
    from), 0 for a file never stored."""

    def __init__(self, document: PolicyDocument, policy: Policy, store: StateStore,
                 disk: PolicyDisk | None = None, *, proofs: tuple[str, ...] = (),
                 deadline_s: float | None = None, version: int = 0) -> None:
        self._current = ActivePolicy(document, policy, version, Engine(policy), proofs=proofs)
        self._store = store
        self._disk = disk
        self._highest = max(version, disk.highest() if disk is not None else 0)
        self._lock = asyncio.Lock()
        self._listeners: list[SwapListener] = []
        self._failed: tuple[int, str] | None = None
        self._deadline_s = deadline_s
        self.reload_failures = 0
        self.restores = 0  # times Redis held an older version and ours was stored again

    @property
    def current(self) -> ActivePolicy:
        return self._current

    @property
    def highest(self) -> int:
        """The highest version this instance has seen: the next one is numbered above."""
        return self._highest

    def on_swap(self, listener: SwapListener) -> None:
        self._listeners.append(listener)

    async def replace(self, document: PolicyDocument,
                      expect: Expected | None = None) -> ActivePolicy:
        """Load, persist and activate ``document``; raises ``PolicyRejected`` (422),
        ``StaleVersion`` (412: Redis does not hold the ``expect``ed version),
        ``PersistError`` (500) or ``StateError`` (Redis: 503), keeping the old policy."""
        async with self._lock:
            policy, warnings, proofs = await _load(document, deadline_s=self._deadline_s)
            prepared = None
            disk = self._disk
            if disk is not None:
                try:
                    prepared = await asyncio.to_thread(
                        disk.prepare, document.name, document.text, document.files, proofs)
                except OSError as exc:
                    raise PersistError(f"cannot write the policy store: {exc}") from exc
            try:
                version, epoch = await asyncio.to_thread(
                    self._store.write_policy, document.text, name=document.name,
                    files=dict(document.files), proofs=proofs, at_least=self._highest + 1,
                    expect=None if expect is None else expect.version,
                    expect_digest="" if expect is None else expect.digest)
            except PolicyVersionMismatch as exc:
                if disk is not None and prepared is not None:
                    disk.discard(prepared)
                raise _stale(expect, exc) from None
            except BaseException:
                if disk is not None and prepared is not None:
                    disk.discard(prepared)
                raise
            self._highest = max(self._highest, version)
            if disk is not None and prepared is not None:
                try:
                    await asyncio.to_thread(disk.commit, prepared, version)
                except OSError:  # already shared through Redis: activate it all the same
                    log.exception("api: policy version %d stored in Redis but not on disk",
                                  version)
            durability = await asyncio.to_thread(self._store.confirm_policy, version, epoch)
            if not durability.durable:
                log.warning("api: policy version %d is %s", version, durability.describe())
            return self._swap(ActivePolicy(document, policy, version, Engine(policy),
                                           warnings, proofs, epoch, durability))

    async def sync(self, read: Callable[[], Awaitable[PolicyRecord | None]]) -> str:
        """One follow step: ``read`` the record, then adopt a newer version, store ours when
        Redis holds none, or store ours again above an older one. Runs under the lock that
        ``replace`` holds, so a record read before a PUT is never adopted after it. Returns
        what it did: "same", "adopted", "failed", "published" or "restored"; raises
        ``StateError``."""
        async with self._lock:
            record = await read()
            if record is None:
                await self._publish(None)
                return "published"
            self._highest = max(self._highest, record.version)
            current = self._current
            match compare(current.identity, record.version, record.digest):
                case Order.NEWER:
                    return await self._adopt(record)
                case Order.SAME:
                    if record.epoch != current.epoch:  # learnt at start, or after a restore
                        self._current = ActivePolicy(
                            current.document, current.policy, current.version,
                            current.engine, current.warnings, current.proofs, record.epoch)
                    return "same"
                case _:
                    await self._publish(record)
                    return "restored"

    async def _adopt(self, record: PolicyRecord) -> str:
        identity = record.identity
        if self._failed == (record.version, identity.digest):
            return "failed"  # already reported
        document = PolicyDocument(record.name, record.text, dict(record.files))
        try:
            policy, warnings, proofs = await _load(document, record.proofs,
                                                   deadline_s=self._deadline_s)
        except PolicyRejected as exc:
            self._failed = (record.version, identity.digest)
            self.reload_failures += 1
            log.error("api: policy version %d in Redis does not load; keeping version %d:"
                      "\n%s", record.version, self._current.version, exc.message)
            return "failed"
        self._persist_quietly(document, record.version, proofs)
        self._swap(ActivePolicy(document, policy, record.version, Engine(policy), warnings,
                                proofs, record.epoch))
        log.info("api: following policy version %d (%s)", record.version, record.name)
        return "adopted"

    async def _publish(self, held: PolicyRecord | None) -> None:
        """Store ours: Redis holds nothing (``held`` None), or ``held``, older than ours or
        another policy under our number. Our own number when it is the highest seen (the
        followers serving it see no change), else the next; only if Redis still holds
        ``held`` (a concurrent write wins, and the next step looks again)."""
        active = self._current
        doc = active.document
        own = active.version and active.version == self._highest
        at_least = active.version if own else self._highest + 1
        try:
            version, epoch = await asyncio.to_thread(
                self._store.write_policy, doc.text, name=doc.name, files=dict(doc.files),
                proofs=active.proofs, at_least=at_least,
                expect=0 if held is None else held.version,
                expect_digest="" if held is None else held.digest)
        except PolicyVersionMismatch:
            return
        self._highest = max(self._highest, version)
        self._persist_quietly(doc, version, active.proofs)
        self._swap(ActivePolicy(doc, active.policy, version, active.engine, active.warnings,
                                active.proofs, epoch))
        if held is None:
            log.info("api: Redis held no policy; stored ours as version %d", version)
        else:
            self.restores += 1
            log.warning("api: Redis held policy version %d (%s), older than ours (it lost its "
                        "data or was restored from a backup); stored ours again as version %d",
                        held.version, held.digest[:12], version)

    def _persist_quietly(self, document: PolicyDocument, version: int,
                         proofs: tuple[str, ...]) -> None:
        if self._disk is None:
            return
        try:
            prepared = self._disk.prepare(document.name, document.text, document.files, proofs)
            self._disk.commit(prepared, version)
        except OSError:
            log.exception("api: cannot write policy version %d to the store", version)

    def _swap(self, active: ActivePolicy) -> ActivePolicy:
        self._current = active
        for listener in self._listeners:
            listener(active)
        return active


def _stale(expect: Expected | None, exc: PolicyVersionMismatch) -> StaleVersion:
    named = "" if expect is None else f"{expect.version}" + (
        f"-{expect.digest}" if expect.digest else "")
    held = PolicyIdentity(exc.version or None, exc.digest)
    stored = f"version {exc.version} ({etag(held)})" if exc.version else "no policy"
    return StaleVersion(f"policy: If-Match names {named}, but the stored policy is {stored}: "
                        "read it again (GET /api/v1/policy), apply your change to it and send "
                        "its ETag", version=exc.version, etag=etag(held) if exc.version else None)


async def _load(document: PolicyDocument, proven: tuple[str, ...] = (), *,
                deadline_s: float | None = None,
                ) -> tuple[Policy, tuple[Diagnostic, ...], tuple[str, ...]]:
    """The policy of ``document``, its warnings and its proofs' digests, through the policy
    gate off the event loop (trusting the ``proven`` digests of a stored record) within
    ``deadline_s``; raises ``PolicyRejected``."""
    checking = asyncio.to_thread(document.accept, proven, deadline_s)
    try:
        if deadline_s is None:
            acceptance = await checking
        else:  # the gate stops itself at its next check; a piece under way is waited less
            acceptance = await asyncio.wait_for(checking, deadline_s + max(1.0, deadline_s / 4))
    except TimeoutError:
        log.error("api: the policy gate did not finish %s within its deadline", document.name)
        raise PolicyRejected(f"{document.name}: checking the policy took longer than its "
                             f"deadline of {deadline_s:g} s; the running policy stays in "
                             "force", diagnostics=[]) from None
    except Exception as exc:  # a loader bug must not replace the running policy either
        log.exception("api: policy loader failed")
        raise PolicyRejected(f"{document.name}: the policy could not be loaded: {exc}",
                             diagnostics=[]) from exc
    if acceptance.policy is None:
        error = acceptance.error()
        raise PolicyRejected(error.render(), diagnostics=[d.as_dict() for d in error.diagnostics])
    return acceptance.policy, tuple(acceptance.warnings), acceptance.proofs
