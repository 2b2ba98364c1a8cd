# SPDX-License-Identifier: Apache-2.0
"""Which backends hold which prompt prefixes in their KV cache, exactly, from the KV events
the servers publish (the precise prefix index; vLLM's ``BlockStored`` / ``BlockRemoved`` /
``AllBlocksCleared``, ``engines.kv_events``).

A server's block hashes cannot be reproduced here (vLLM seeds its chain with a random value
per process), so the index keys blocks by their tokens instead: a stored block's key is
``hash((parent key, its token ids as bytes))``, its parent key the one recorded for the
event's ``parent_block_hash`` on that backend (0 for a prompt's first block). A request's
prompt gets the same keys from the model's tokenizer (``token_keys``). A block whose parent
this index never saw (its event was lost) cannot be keyed and is left out: the index only
ever holds blocks a backend really has, so it may miss a hit but never invents one.

A backend whose event stream broke (``reset``: a gap that replay could not fill, the
publisher restarted, the connection dropped) is forgotten and marked not ``exact`` until
``resume``; the scorer reads the approximate index for it meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

from engines.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent
from engines.sim_tokens import TOKEN_BYTES, ids_bytes
from regions.balancer.scheduling.block_owners import BlockOwners

ROOT = 0
DEFAULT_KV_BLOCK_SIZE = 16  # vLLM's on CUDA, until a server's events say otherwise


def token_keys(data: bytes, block_size: int, limit: int) -> tuple[int, ...]:
    """The index keys of a prompt's full blocks (its token ids, ``TOKEN_BYTES`` each, as
    the model's tokenizer gives them: ``http.tokenizers``), at most ``limit``."""
    width = block_size * TOKEN_BYTES
    keys: list[int] = []
    key = ROOT
    for start in range(0, min(len(data), limit * width) - width + 1, width):
        key = hash((key, data[start:start + width]))
        keys.append(key)
    return tuple(keys)


class KvEventIndex:
    """Block key -> backends holding it, maintained from each backend's KV events."""

    def __init__(self) -> None:
        self._owners = BlockOwners()
        self._keys: dict[str, dict[int | bytes, int]] = {}  # backend: server hash -> key
        self._exact: set[str] = set()
        self.block_size: int | None = None  # as the events say
        self.unkeyed_blocks = 0  # stored blocks whose parent was never seen

    def __len__(self) -> int:
        return len(self._owners)

    def exact(self, backend: str) -> bool:
        """Whether ``backend``'s stream is intact (its entries can be trusted whole)."""
        return backend in self._exact

    @property
    def exact_backends(self) -> AbstractSet[str]:
        """The backends whose streams are intact: a live read-only view (read on every
        request, so not copied)."""
        return self._exact

    def blocks_of(self, backend: str) -> int:
        return len(self._keys.get(backend, ()))

    def resume(self, backend: str) -> None:
        """``backend``'s stream is connected and in sequence: trust what it says."""
        self._exact.add(backend)

    def reset(self, backend: str) -> None:
        """``backend``'s stream broke: forget it and stop trusting it until ``resume``."""
        self._exact.discard(backend)
        self.forget(backend)

    def forget(self, backend: str) -> None:
        for key in self._keys.pop(backend, {}).values():
            self._owners.drop(key, backend)

    def apply(self, backend: str, events: Iterable[KvEvent]) -> None:
        """Apply one batch of ``backend``'s events, in order."""
        keys = self._keys.setdefault(backend, {})
        for event in events:
            if isinstance(event, BlockStored):
                if event.medium not in (None, "GPU"):
                    continue  # offloaded copies (CPU, disk) do not skip a GPU prefill
                self._stored(backend, keys, event)
            elif isinstance(event, BlockRemoved):
                if event.medium not in (None, "GPU"):
                    continue
                for h in event.block_hashes:
                    key = keys.pop(h, None)
                    if key is not None:
                        self._owners.drop(key, backend)
            elif isinstance(event, AllBlocksCleared):
                self.forget(backend)
                keys = self._keys.setdefault(backend, {})

    def match(self, keys: Sequence[int]) -> dict[str, int]:
        """Leading blocks of ``keys`` each backend holds, whole from the first."""
        return self._owners.match(keys)

    def _stored(self, backend: str, keys: dict[int | bytes, int], event: BlockStored) -> None:
        size = event.block_size
        if size < 1 or len(event.token_ids) < size * len(event.block_hashes):
            return
        self.block_size = size
        if event.parent_block_hash is None:
            parent = ROOT
        else:
            known = keys.get(event.parent_block_hash)
            if known is None:
                self.unkeyed_blocks += len(event.block_hashes)
                return
            parent = known
        try:
            data = ids_bytes(event.token_ids)
        except ValueError:
            self.unkeyed_blocks += len(event.block_hashes)
            return
        width = size * TOKEN_BYTES
        for i, h in enumerate(event.block_hashes):
            parent = hash((parent, data[i * width:(i + 1) * width]))
            old = keys.get(h)
            if old is not None and old != parent:
                self._owners.drop(old, backend)
            keys[h] = parent
            self._owners.add(parent, backend)
