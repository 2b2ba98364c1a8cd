"""Where the DNS server reads the current state snapshot from.

``SnapshotSource`` is the interface: a ``current`` property that returns the latest immutable
``Snapshot`` without I/O. ``StaticSnapshotSource`` keeps one in process and is settable (tests,
the embedded mode before the state store is up); the Redis-backed
``director.refresh.refresher.SnapshotRefresher`` has the same property.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from director.engine.snapshot import RegionState, Snapshot


class SnapshotSource(Protocol):
    @property
    def current(self) -> Snapshot: ...


class StaticSnapshotSource:
    """An in-process snapshot; ``set``/``update`` swap it and bump the version."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self._current = snapshot or Snapshot()

    @property
    def current(self) -> Snapshot:
        return self._current

    def set(self, snapshot: Snapshot) -> None:
        """Replace the snapshot as given (its version should differ from the current one)."""
        self._current = snapshot

    def update(self, regions: Mapping[str, RegionState] | None = None,
               latency: Mapping[str, Mapping[str, float]] | None = None) -> Snapshot:
        """Swap in a snapshot with the next version and the given state."""
        old = self._current
        new = Snapshot(version=old.version + 1,
                       regions=dict(regions) if regions is not None else old.regions,
                       latency=dict(latency) if latency is not None else old.latency)
        self._current = new
        return new
