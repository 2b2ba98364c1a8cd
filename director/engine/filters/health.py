"""Health filter: drop regions that are down or draining.

Reads: ``RegionState.healthy`` (None = never probed, kept: no region fails for lack of data)
and ``RegionState.draining`` from the snapshot. Stale state is used as last known good.
Parameters: none. What happens when nothing is left is the all-down behaviour
(``director.engine.all_down``), not this filter's business.
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from director.engine.types import Step


def health_filter(ctx: DecisionContext,
                  candidates: tuple[str, ...]) -> tuple[tuple[str, ...], Step]:
    kept: list[str] = []
    dropped: dict[str, str] = {}
    for name in candidates:
        state = ctx.snapshot.region(name)
        if state.draining:
            dropped[name] = "draining"
        elif state.healthy is False:
            dropped[name] = "down" + (" (stale state, last known)" if state.stale else "")
        else:
            kept.append(name)
    return tuple(kept), Step("filter", "health", tuple(kept), dropped)
