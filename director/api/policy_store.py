"""The active policy of this API instance, replaced atomically and only by a good one.

``PolicyHolder.replace`` (``PUT /api/v1/policy``): load through the policy gate
(``director.policy_gate``: both residency proofs and the lint) off the event loop, within
``deadline_s`` (a policy whose check runs longer is refused, 422, and the lock is given back
at that deadline even if a proof under way has not reached its next check), write the
files to the store directory under temporary names, store the policy in Redis (which assigns
the version), rename the files to that version, then swap the reference. Any failure before
the Redis write leaves everything as it was: the last good policy keeps serving.
``PolicyHolder.sync`` follows a version another instance (or ``director up``) stored; a
version that fails to load is logged and skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from director.api.config import PolicyDocument
from director.api.errors import ApiError, PolicyRejected
from director.api.policy_disk import PolicyDisk
from director.engine import Engine
from policies import Diagnostic, Policy
from state import PolicyRecord, StateStore

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


class PersistError(ApiError):
    status = 500


SwapListener = Callable[[ActivePolicy], None]


class PolicyHolder:
    """Holds the active policy; ``current`` is a plain reference read (no I/O)."""

    def __init__(self, document: PolicyDocument, policy: Policy, store: StateStore,
                 disk: PolicyDisk | None = None, *, proofs: tuple[str, ...] = (),
                 deadline_s: float | None = None) -> None:
        self._current = ActivePolicy(document, policy, 0, Engine(policy), proofs=proofs)
        self._store = store
        self._disk = disk
        self._lock = asyncio.Lock()
        self._listeners: list[SwapListener] = []
        self._failed: tuple[int, float] | None = None
        self._deadline_s = deadline_s
        self.reload_failures = 0

    @property
    def current(self) -> ActivePolicy:
        return self._current

    def on_swap(self, listener: SwapListener) -> None:
        self._listeners.append(listener)

    async def replace(self, document: PolicyDocument) -> ActivePolicy:
        """Load, persist and activate ``document``; raises ``PolicyRejected`` (422),
        ``PersistError`` (500) or ``StateError`` (Redis: 503), keeping the old policy."""
        async with self._lock:
            policy, warnings, proofs = await _load(document, deadline_s=self._deadline_s)
            prepared = None
            disk = self._disk
            if disk is not None:
                try:
                    prepared = await asyncio.to_thread(
                        disk.prepare, document.name, document.text, document.files)
                except OSError as exc:
                    raise PersistError(f"cannot write the policy store: {exc}") from exc
            try:
                version = await asyncio.to_thread(
                    self._store.set_policy, document.text, name=document.name,
                    files=dict(document.files), proofs=proofs)
            except BaseException:
                if disk is not None and prepared is not None:
                    disk.discard(prepared)
                raise
            if disk is not None and prepared is not None:
                try:
                    await asyncio.to_thread(disk.commit, prepared, version)
                except OSError:  # already shared through Redis: activate it all the same
                    log.exception("api: policy version %d stored in Redis but not on disk",
                                  version)
            return self._swap(ActivePolicy(document, policy, version, Engine(policy),
                                           warnings, proofs))

    async def sync(self, read: Callable[[], Awaitable[PolicyRecord | None]]) -> str:
        """One follow step: ``read`` the record, then adopt a version we do not run, or
        store ours when Redis holds none. Runs under the lock that ``replace`` holds, so a
        record read before a PUT is never adopted after it. Returns what it did: "same",
        "adopted", "failed" or "published"; raises ``StateError``."""
        async with self._lock:
            record = await read()
            if record is None:
                await self._publish()
                return "published"
            return await self._adopt(record)

    async def _adopt(self, record: PolicyRecord) -> str:
        if record.version == self._current.version:
            return "same"
        if self._failed == (record.version, record.timestamp):
            return "failed"  # already reported
        document = PolicyDocument(record.name, record.text, dict(record.files))
        try:
            policy, warnings, proofs = await _load(document, record.proofs,
                                                   deadline_s=self._deadline_s)
        except PolicyRejected as exc:
            self._failed = (record.version, record.timestamp)
            self.reload_failures += 1
            log.error("api: policy version %d in Redis does not load; keeping version %d:"
                      "\n%s", record.version, self._current.version, exc.message)
            return "failed"
        self._persist_quietly(document, record.version)
        self._swap(ActivePolicy(document, policy, record.version, Engine(policy), warnings,
                                proofs))
        log.info("api: following policy version %d (%s)", record.version, record.name)
        return "adopted"

    async def _publish(self) -> None:
        active = self._current
        doc = active.document
        version = await asyncio.to_thread(self._store.set_policy, doc.text, name=doc.name,
                                          files=dict(doc.files), proofs=active.proofs)
        self._persist_quietly(doc, version)
        self._swap(ActivePolicy(doc, active.policy, version, active.engine, active.warnings,
                                active.proofs))
        log.info("api: Redis held no policy; stored ours as version %d", version)

    def _persist_quietly(self, document: PolicyDocument, version: int) -> None:
        if self._disk is None:
            return
        try:
            prepared = self._disk.prepare(document.name, document.text, document.files)
            self._disk.commit(prepared, version)
        except OSError:
            log.exception("api: cannot write policy version %d to the store", version)

    def _swap(self, active: ActivePolicy) -> ActivePolicy:
        self._current = active
        for listener in self._listeners:
            listener(active)
        return active


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
