# SPDX-License-Identifier: Apache-2.0
"""Block key -> the backends holding that block, and the longest held run of a prompt's
blocks per backend: what both prefix indexes (``affinity_index``, ``kv_event_index``) share.
"""

from __future__ import annotations

from collections.abc import Sequence


class BlockOwners:
    """Which backends hold each block key."""

    def __init__(self) -> None:
        self._owners: dict[int, set[str]] = {}

    def __len__(self) -> int:
        """Distinct blocks some backend holds."""
        return len(self._owners)

    def add(self, key: int, backend: str) -> None:
        holders = self._owners.get(key)
        if holders is None:
            self._owners[key] = {backend}
        else:
            holders.add(backend)

    def drop(self, key: int, backend: str) -> None:
        holders = self._owners.get(key)
        if holders is not None:
            holders.discard(backend)
            if not holders:
                del self._owners[key]

    def match(self, keys: Sequence[int]) -> dict[str, int]:
        """Leading blocks of ``keys`` each backend holds whole from the first (absent:
        none): one walk for all backends, stopping when nobody holds the next block, as a
        server's own prefix lookup stops at its first miss."""
        held: dict[str, int] = {}
        owners = self._owners
        alive: set[str] | None = None
        for i, key in enumerate(keys, start=1):
            holders = owners.get(key)
            if not holders:
                break
            alive = set(holders) if alive is None else alive & holders
            if not alive:
                break
            for name in alive:
                held[name] = i
        return held
