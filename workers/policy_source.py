"""Where the beat scheduler gets its policy, and how it notices a new one.

``poll()`` returns the policy when it changed since the last call (the first call always
returns it), else None. Every policy passes the policy gate (``director.policy_gate``); one
that fails it never replaces the running one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Protocol

from policies.model import Policy
from state.errors import StateError
from state.policy_follower import RecordLoader, StoredVersions
from state.store import StateStore
from workers.config import WorkerSettings
from workers.errors import PolicySourceError

log = logging.getLogger(__name__)


def gate() -> ModuleType:
    """The policy gate every loaded policy passes (``director.policy_gate``); imported when
    first needed, so that importing the workers does not load the decision engine."""
    from director import policy_gate

    return policy_gate


class PolicySource(Protocol):
    def poll(self) -> Policy | None: ...


class StaticPolicy:
    """A policy given in-process; ``replace()`` swaps it (tests, ``director up``)."""

    def __init__(self, policy: Policy) -> None:
        self._policy: Policy | None = policy

    def replace(self, policy: Policy) -> None:
        self._policy = policy

    def poll(self) -> Policy | None:
        policy, self._policy = self._policy, None
        return policy


class PolicyFile:
    """A policy file, reloaded when its modification time or size changes."""

    def __init__(
        self, path: str | os.PathLike[str], loader: Callable[[Path], Policy] | None = None
    ):
        self.path = Path(path)
        self._loader = loader
        self._seen: tuple[int, int] | None = None
        self._pending: Policy | None = None

    @classmethod
    def loaded(
        cls, path: str | os.PathLike[str], loader: Callable[[Path], Policy] | None = None
    ) -> PolicyFile:
        """A source whose policy is loaded now; the loader's errors propagate unchanged
        (:class:`policies.PolicyError` for a missing or invalid file), for a CLI to report.

        Its first ``poll()`` returns that policy; later ones follow the file as usual.
        """
        source = cls(path, loader)
        try:
            stat = source.path.stat()  # before loading: a change during the load is seen later
        except OSError:
            source._load(source.path)  # the loader says why (no such file, ...)
            raise
        source._pending = source._load(source.path)
        source._seen = (stat.st_mtime_ns, stat.st_size)
        return source

    @property
    def policy(self) -> Policy | None:
        """The policy loaded by :meth:`loaded` and not yet returned by ``poll()``."""
        return self._pending

    def poll(self) -> Policy | None:
        if self._pending is not None:
            policy, self._pending = self._pending, None
            return policy
        try:
            stat = self.path.stat()
        except OSError as exc:
            if self._seen is None:
                raise PolicySourceError(f"{self.path}: {exc.strerror}") from exc
            log.warning("policy %s unreadable, keeping the running one: %s", self.path, exc)
            return None
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return None
        first = self._seen is None
        self._seen = seen
        try:
            policy = self._load(self.path)
        except Exception as exc:  # the parser's error tree is not ours to enumerate
            if first:
                raise PolicySourceError(f"{self.path}: {exc}") from exc
            log.error("policy %s does not load, keeping the running one: %s", self.path, exc)
            return None
        return policy

    def _load(self, path: Path) -> Policy:
        if self._loader is not None:
            return self._loader(path)
        return gate().load(str(path))


class StoredPolicy:
    """Follow the policy stored in Redis (``director up``, ``PUT /api/v1/policy``), starting
    from ``initial``: the stored version wins once there is one, and a stored version that
    does not load never replaces the running policy. Redis errors keep the running one."""

    def __init__(self, store: StateStore, initial: PolicySource,
                 load: RecordLoader | None = None) -> None:
        self.store = store
        self.initial = initial
        self.versions = StoredVersions(load or gate().load_record)

    @property
    def version(self) -> int | None:
        return self.versions.version

    @property
    def rejected(self) -> int | None:
        return self.versions.rejected

    def poll(self) -> Policy | None:
        first = self.initial.poll() if self.versions.version is None else None
        try:
            record = self.store.policy()
        except StateError as exc:
            log.warning("stored policy unreadable, keeping the running one: %s", exc)
            return first
        policy = self.versions.adopt(record) if record is not None else None
        return policy if policy is not None else first


def policy_source(initial: PolicySource, settings: WorkerSettings) -> PolicySource:
    """What beat follows: ``initial``, then the version stored in the state server once
    there is one (unless ``settings.follow_policy`` is off)."""
    if not settings.follow_policy:
        return initial
    store = StateStore.from_url(settings.redis_url, prefix=settings.state_prefix)
    return StoredPolicy(store, initial)
