# SPDX-License-Identifier: Apache-2.0
"""Where each backend name sits in a region's list of backend views, kept across requests.

Affinity scorers remember backends by name; the pipeline samples by position. A map from
name to position is rebuilt only when the region changes shape: a different length, or a
name missing or found elsewhere than remembered in a list the map was not built from (the
pool replaces a view in place only for the same backend, and builds a new list when its
membership changes). A lookup costs a dict access and one check, and a name that is not in
the region (an affinity memory of a removed backend) does not rebuild the map every time.
``generation`` counts rebuilds: what a caller derived from the old layout is stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from regions.balancer.types import BackendSnapshot


class NamePositions:
    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._size = -1
        self._source: Sequence[BackendSnapshot] | None = None  # the list the map is of
        self.generation = 0

    def sync(self, backends: Sequence[BackendSnapshot]) -> None:
        """Rebuild the map if ``backends`` has another length than last time."""
        if len(backends) != self._size:
            self._rebuild(backends)

    def of(self, backends: Sequence[BackendSnapshot], names: Iterable[str]) -> list[int]:
        """The positions of ``names`` in ``backends`` (names not there are left out)."""
        self.sync(backends)
        out = []
        for name in names:
            at = self._positions.get(name)
            if (at is None or backends[at].name != name) and backends is not self._source:
                self._rebuild(backends)
                at = self._positions.get(name)
            if at is not None and backends[at].name == name:
                out.append(at)
        return out

    def _rebuild(self, backends: Sequence[BackendSnapshot]) -> None:
        self._positions = {b.name: i for i, b in enumerate(backends)}
        self._size = len(backends)
        self._source = backends
        self.generation += 1
