"""The immutable view of the world a routing decision reads: health, load, latency, drains.

A background task (the state store's refresher, or a test) builds a new ``Snapshot`` when
anything changes and swaps a reference; decisions never see a half-updated view and never do
I/O. ``version`` changes with every swap, so caches keyed by it are exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class RegionState:
    """What is known of one region right now.

    ``healthy`` None means never probed: treated as healthy (a region is not failed for lack
    of data). ``utilization`` is live load over capacity (1.0 = at capacity), None when unknown.
    ``stale`` marks state kept past its freshness bound (fail-static): used, but reported.
    """

    healthy: bool | None = None
    utilization: float | None = None
    draining: bool = False
    stale: bool = False
    degraded: bool = False  # e.g. flapping or some GPU servers down: shortens TTLs
    # endpoints whose own balancer is known down (a region with several): DNS leaves them
    # out of the region's addresses while another is up
    down_endpoints: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    regions: Mapping[str, RegionState] = field(default_factory=lambda: _EMPTY)
    # measured RTT in milliseconds: client network (CIDR text, e.g. "81.2.69.0/24") -> region -> ms
    latency: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: _EMPTY)

    def region(self, name: str) -> RegionState:
        return self.regions.get(name, _UNKNOWN)


_UNKNOWN = RegionState()
