# SPDX-License-Identifier: Apache-2.0
"""Which backends likely hold which prompt prefixes in their KV cache, learned from what
the balancer sent where (the approximate prefix index).

Keys are the chained block hashes of ``RequestInfo.prefix`` (``h_i`` names the whole
prompt prefix up to block ``i``). Each backend has its own least-recently-used set of the
blocks it was sent, bounded by its KV capacity in blocks (``set_capacity``, from the
capacity its metrics publish; until then ``DEFAULT_BLOCKS``), so blocks age out as the
server would evict them. ``record`` runs when a request is bound to a backend; it touches
the request's blocks last to first, so a prefix's head is always more recent than its tail
and is forgotten after it, as vLLM frees a request's blocks tail first.

``match(prefix)`` gives, per backend, how many leading blocks of ``prefix`` it holds whole
(``block_owners.BlockOwners.match``). Reading never changes the order (the scorer stays a
pure read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from regions.balancer.scheduling.block_owners import BlockOwners

DEFAULT_BLOCKS = 27_000  # 432,000 KV tokens in 16-token blocks: an 8B model on an 80 GB GPU


class AffinityIndex:
    """Block hash -> backends holding it, each backend's blocks in LRU order."""

    def __init__(self, blocks_per_backend: int = DEFAULT_BLOCKS) -> None:
        if blocks_per_backend < 1:
            raise ValueError("affinity index: blocks_per_backend must be >= 1")
        self.default_blocks = blocks_per_backend
        self._owners = BlockOwners()
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}

    def __len__(self) -> int:
        """Distinct blocks some backend holds."""
        return len(self._owners)

    def blocks_of(self, backend: str) -> int:
        """How many blocks ``backend`` is believed to hold."""
        return len(self._lru.get(backend, ()))

    def capacity(self, backend: str) -> int:
        return self._capacity.get(backend, self.default_blocks)

    def set_capacity(self, backend: str, blocks: int) -> None:
        """``backend`` holds at most ``blocks`` blocks (its KV capacity)."""
        if blocks >= 1 and self._capacity.get(backend) != blocks:
            self._capacity[backend] = blocks
            self._trim(backend)

    def record(self, prefix: Sequence[int], backend: str) -> None:
        """``backend`` now holds every block of ``prefix``."""
        if not prefix:
            return
        lru = self._lru.get(backend)
        if lru is None:
            lru = self._lru[backend] = OrderedDict()
        add = self._owners.add
        for h in reversed(prefix):
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                add(h, backend)
        self._trim(backend)

    def match(self, prefix: Sequence[int]) -> dict[str, int]:
        """Leading blocks of ``prefix`` each backend holds (absent: none)."""
        return self._owners.match(prefix)

    def forget(self, backend: str) -> None:
        """Drop everything ``backend`` holds (it left the region, or restarted)."""
        for h in self._lru.pop(backend, ()):
            self._owners.drop(h, backend)

    def _trim(self, backend: str) -> None:
        lru = self._lru.get(backend)
        if lru is None:
            return
        excess = len(lru) - self.capacity(backend)
        for _ in range(max(excess, 0)):
            h, _ = lru.popitem(last=False)
            self._owners.drop(h, backend)
