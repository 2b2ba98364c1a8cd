# SPDX-License-Identifier: Apache-2.0
"""Where each backend name sits in a region's list of backend views, kept across requests.

Affinity scorers remember backends by name; the pipeline samples by position. A map from
name to position is rebuilt only when the region changes shape: another list whose names
differ from the ones the map was built from (the pool replaces a view in place only for the
same backend, and builds a new list when its membership changes; comparing the names of a
new list costs about what building it did). A lookup costs a dict access, and a name that
is not in the region (an affinity memory of a removed backend) does not rebuild the map.
``generation`` counts rebuilds: what a caller derived from the old layout is stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from regions.balancer.types import BackendSnapshot


class NamePositions:
    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._source: Sequence[BackendSnapshot] | None = None  # the list the map is of
        self._names: list[str] = []  # the names of that list, in order
        self.generation = 0

    def sync(self, backends: Sequence[BackendSnapshot]) -> None:
        """Rebuild the map if ``backends`` holds other names, or the same in another order,
        than the list it was built from (the same list object is not compared again)."""
        if backends is self._source:
            return
        names = self._names
        if len(backends) != len(names) or any(
                b.name != name for b, name in zip(backends, names, strict=True)):
            self._rebuild(backends)
        else:
            self._source = backends

    def of(self, backends: Sequence[BackendSnapshot], names: Iterable[str]) -> list[int]:
        """The positions of ``names`` in ``backends`` (names not there are left out)."""
        self.sync(backends)
        positions = self._positions
        return [at for at in (positions.get(name) for name in names) if at is not None]

    def _rebuild(self, backends: Sequence[BackendSnapshot]) -> None:
        self._positions = {b.name: i for i, b in enumerate(backends)}
        self._names = [b.name for b in backends]
        self._source = backends
        self.generation += 1
