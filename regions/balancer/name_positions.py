# SPDX-License-Identifier: Apache-2.0
"""Where each backend name sits in a region's list of backend views, kept across requests.

Affinity scorers remember backends by name; the pipeline samples by position. A map from
name to position is rebuilt only when the region changes shape (a different length, or a
name found elsewhere than remembered), so a lookup costs a dict access and one check.
``generation`` counts rebuilds: what a caller derived from the old layout is stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from regions.balancer.types import BackendSnapshot


class NamePositions:
    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._size = -1
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
            if at is None or backends[at].name != name:
                self._rebuild(backends)
                at = self._positions.get(name)
                if at is None:
                    continue
            out.append(at)
        return out

    def _rebuild(self, backends: Sequence[BackendSnapshot]) -> None:
        self._positions = {b.name: i for i, b in enumerate(backends)}
        self._size = len(backends)
        self.generation += 1
