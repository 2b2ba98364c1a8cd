"""Shared state of every tier on the Redis protocol: health, load, latency, policy, drains.

- :mod:`~state.keys`, :mod:`~state.records`: the key layout and the records stored there;
- :mod:`~state.store` / :mod:`~state.aio`: sync and asyncio access (probe outcomes through
  :mod:`~state.hysteresis`, drain ends through :mod:`~state.drain_expiry`), their writes
  written once in :mod:`~state.writes`;
- :mod:`~state.view`: one read of everything a policy's regions need;
- :mod:`~state.policy_follower`: follow the stored policy version;
- :mod:`~state.embedded`: a real Valkey on loopback for ``director up`` and tests, never
  open (a password, and the ACL users of :mod:`~state.acl`);
- :mod:`~state.acl`, :mod:`~state.credentials`: one Redis user per role and what it may
  do; credentials from the URL or a user and password file;
- :mod:`~state.private_file`: files of mode 0600 replaced whole;
- :mod:`~state.ports`, :mod:`~state.tasks`: free loopback ports, task cancellation, which
  every tier's processes and loops share.

It imports no tier (only :mod:`policies`); the global tier's snapshot is built from it in
:mod:`director.refresh`. Errors are drawn in :mod:`state.errors`.
"""

from state.aio import AsyncStateStore
from state.embedded import EmbeddedValkey
from state.errors import (
    EmbeddedServerError,
    RecordError,
    StateError,
    StateUnavailable,
)
from state.keys import Keys
from state.records import (
    DrainFlags,
    GpuLoad,
    HealthRecord,
    LatencySample,
    PolicyRecord,
    RegionLoad,
)
from state.store import StateStore

__all__ = [
    "AsyncStateStore",
    "DrainFlags",
    "EmbeddedServerError",
    "EmbeddedValkey",
    "GpuLoad",
    "HealthRecord",
    "Keys",
    "LatencySample",
    "PolicyRecord",
    "RecordError",
    "RegionLoad",
    "StateError",
    "StateStore",
    "StateUnavailable",
]
