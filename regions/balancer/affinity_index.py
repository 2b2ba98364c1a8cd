# SPDX-License-Identifier: Apache-2.0
"""Which backends served which prompt prefixes recently: a bounded LRU index.

Keys are the chained block hashes of ``RequestInfo.prefix`` (``h_i`` names the whole
prompt prefix up to block ``i``); each maps to the few backends (``owners``, default 4,
most recent first) that were bound a request with that prefix, so they likely still hold
its KV cache. ``record`` runs when a request is bound to a backend (the dispatcher's bind
hook); it touches every block of the request, so a prefix's leading blocks are never
older than its later ones. Beyond ``capacity`` blocks (default 65,536: a few MB) the least
recently recorded is forgotten.

``match(prefix)`` gives, per backend, how many leading blocks it holds: the index of the
last block it owns, walking from the first and stopping at the first block nobody owns.
Reading never changes the order (the scorer stays a pure read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

DEFAULT_CAPACITY = 65_536
DEFAULT_OWNERS = 4


class AffinityIndex:
    """Block hash -> recent backends, least recently recorded first out."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, owners: int = DEFAULT_OWNERS) -> None:
        if capacity < 1 or owners < 1:
            raise ValueError("affinity index: capacity and owners must be >= 1")
        self.capacity = capacity
        self.owners = owners
        self._blocks: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def record(self, prefix: Sequence[int], backend: str) -> None:
        """``backend`` now holds every block of ``prefix``."""
        blocks = self._blocks
        for h in prefix:
            owners = blocks.pop(h, ())
            if owners[:1] != (backend,):
                owners = (backend, *(o for o in owners if o != backend))[: self.owners]
            blocks[h] = owners
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def match(self, prefix: Sequence[int]) -> dict[str, int]:
        """Leading blocks of ``prefix`` each backend holds (absent: none)."""
        held: dict[str, int] = {}
        blocks = self._blocks
        for i, h in enumerate(prefix, start=1):
            owners = blocks.get(h)
            if not owners:
                break
            for name in owners:
                held[name] = i
        return held

    def forget(self, backend: str) -> None:
        """Drop ``backend`` from every block (it left the region)."""
        for h, owners in list(self._blocks.items()):
            if backend in owners:
                rest = tuple(o for o in owners if o != backend)
                if rest:
                    self._blocks[h] = rest
                else:
                    del self._blocks[h]
