# SPDX-License-Identifier: Apache-2.0
"""The LoRA adapters one simulated server holds loaded: pure state, no I/O, no clock.

vLLM keeps up to ``--max-cpu-loras`` adapters' weights in memory, least recently used
evicted when another is loaded (its ``LRUCacheWorkerLoRAManager``). An adapter is loaded
when ``/v1/load_lora_adapter`` registers it, and again when a request needs it after an
eviction; ``loads`` counts both, per adapter, which is what a balancer's placement costs
the fleet.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field


@dataclass
class AdapterCache:
    """Adapters loaded, least recently used first; at most ``slots``."""

    slots: int
    loaded: OrderedDict[str, None] = field(default_factory=OrderedDict)
    loads: Counter[str] = field(default_factory=Counter)
    evictions: int = 0

    def use(self, name: str) -> bool:
        """Mark ``name`` used now; False if it must be loaded first (see ``load``)."""
        if name not in self.loaded:
            return False
        self.loaded.move_to_end(name)
        return True

    def load(self, name: str) -> str | None:
        """Load ``name`` (most recently used); returns the adapter evicted for it, if any."""
        self.loads[name] += 1
        if name in self.loaded:
            self.loaded.move_to_end(name)
            return None
        self.loaded[name] = None
        if len(self.loaded) <= self.slots:
            return None
        evicted, _ = self.loaded.popitem(last=False)
        self.evictions += 1
        return evicted

    def remove(self, name: str) -> bool:
        """Forget ``name`` (an unload); False if it was not loaded."""
        if name not in self.loaded:
            return False
        del self.loaded[name]
        return True
