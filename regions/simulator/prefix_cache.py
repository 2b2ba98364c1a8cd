# SPDX-License-Identifier: Apache-2.0
"""The KV block pool of one simulated server with automatic prefix caching, as vLLM v1's
``BlockPool`` and ``KVCacheManager`` keep it (``vllm/v1/core/block_pool.py``,
``vllm/v1/core/kv_cache_manager.py``): pure state, no I/O.

A computed full block is cached under its chained hash (``prompt_blocks``). Running
sequences hold references on the cached blocks of their prompt; a block nobody references
stays cached but counts as free space, in a least-recently-freed queue, and is evicted
(forgotten) only when the space is needed. A sequence releases its blocks last block first,
so that a prefix's tail is evicted before its head, as vLLM frees them.

The scheduler asks ``lookup`` for the longest cached prefix of a new sequence (at most
``max_blocks``: vLLM always recomputes the prompt's last token), ``acquire``s the hit,
``store``s the blocks it computes, ``release``s them when the sequence ends or is
preempted, and calls ``evict`` with the number of blocks the running sequences leave free.
``store`` returns the runs of blocks it newly cached and ``evict`` the blocks it forgot:
what a server publishes as KV events.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class PrefixCacheStats:
    """Cumulative counters, in tokens (vLLM's ``prefix_cache_queries`` / ``_hits``)."""

    queries: int = 0
    hits: int = 0
    evicted_blocks: int = 0


class PrefixCache:
    """Block hash -> reference count, with cached free blocks in eviction order."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.stats = PrefixCacheStats()
        self._refs: dict[int, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced; LRU first

    def __len__(self) -> int:
        """Blocks cached, referenced or not."""
        return len(self._refs)

    @property
    def referenced(self) -> int:
        """Cached blocks some running sequence references (in use)."""
        return len(self._refs) - len(self._free)

    @property
    def free_cached(self) -> int:
        """Cached blocks no running sequence references (evictable)."""
        return len(self._free)

    def lookup(self, hashes: Sequence[int], max_blocks: int) -> int:
        """How many leading blocks of ``hashes`` are cached (at most ``max_blocks``)."""
        refs = self._refs
        n = 0
        for h in hashes[:max_blocks]:
            if h not in refs:
                break
            n += 1
        return n

    def unreferenced(self, hashes: Sequence[int]) -> int:
        """How many of ``hashes`` (all cached) no sequence references yet: acquiring them
        takes that many blocks out of the free space."""
        free = self._free
        return sum(1 for h in hashes if h in free)

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference cached blocks (a sequence reuses them)."""
        refs, free = self._refs, self._free
        for h in hashes:
            if refs[h] == 0:
                del free[h]
            refs[h] += 1

    def store(self, hashes: Sequence[int]) -> list[tuple[int, int]]:
        """A sequence computed these consecutive blocks: reference them, caching the ones
        not cached yet; return the ``(start, end)`` index runs of ``hashes`` newly cached."""
        refs, free = self._refs, self._free
        runs: list[tuple[int, int]] = []
        start: int | None = None
        for i, h in enumerate(hashes):
            count = refs.get(h)
            if count is None:
                refs[h] = 1
                if start is None:
                    start = i
                continue
            if count == 0:
                del free[h]
            refs[h] = count + 1
            if start is not None:
                runs.append((start, i))
                start = None
        if start is not None:
            runs.append((start, len(hashes)))
        return runs

    def release(self, hashes: Sequence[int]) -> None:
        """Drop a sequence's references, last block first; unreferenced blocks stay cached
        and become evictable, the prefix's tail before its head."""
        refs, free = self._refs, self._free
        for h in reversed(hashes):
            count = refs[h] - 1
            refs[h] = count
            if count == 0:
                free[h] = None

    def evict(self, free_blocks: int) -> list[int]:
        """Forget least recently freed cached blocks until at most ``free_blocks`` remain
        cached and unreferenced; return the forgotten hashes."""
        free = self._free
        excess = len(free) - max(free_blocks, 0)
        if excess <= 0:
            return []
        gone = [free.popitem(last=False)[0] for _ in range(excess)]
        for h in gone:
            del self._refs[h]
        self.stats.evicted_blocks += excess
        return gone

    def clear(self) -> list[int]:
        """Forget every unreferenced block (vLLM's ``reset_prefix_cache``); return them."""
        return self.evict(0)
