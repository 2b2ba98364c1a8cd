"""Shared state of the director on the Redis protocol: health, load, latency, policy, drains.

- :mod:`~director.state.store` / :mod:`~director.state.aio`: sync and asyncio access;
- :mod:`~director.state.refresher`: keeps an immutable snapshot fresh for the DNS tier;
- :mod:`~director.state.embedded`: a real Valkey on loopback for ``director up`` and tests.

Errors are drawn in :mod:`director.state.errors`.
"""

from director.state.aio import AsyncStateStore
from director.state.embedded import EmbeddedValkey
from director.state.errors import (
    EmbeddedServerError,
    RecordError,
    StateError,
    StateUnavailable,
)
from director.state.keys import Keys
from director.state.records import (
    DrainFlags,
    GpuLoad,
    HealthRecord,
    LatencySample,
    PolicyRecord,
    RegionLoad,
)
from director.state.refresher import SnapshotRefresher
from director.state.store import StateStore

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
    "SnapshotRefresher",
    "StateError",
    "StateStore",
    "StateUnavailable",
]
