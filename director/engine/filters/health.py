"""Health filter: drop regions that are down or draining.

Reads: ``RegionState.healthy`` (None = never probed, kept: no region fails for lack of data)
and ``RegionState.draining`` from the snapshot. Stale state is used as last known good.
Parameters: none. What happens when nothing is left is the all-down behaviour
(``director.engine.all_down``), not this filter's business.
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from routing import FilterBase


class HealthFilter(FilterBase[DecisionContext, str]):
    name = "health"

    def check(self, request: DecisionContext, candidate: str) -> str | None:
        state = request.snapshot.region(candidate)
        if state.draining:
            return "draining"
        if state.healthy is False:
            return "down" + (" (stale state, last known)" if state.stale else "")
        return None
