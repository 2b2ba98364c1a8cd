"""Priority scorer: a fixed order from the service's ``priority`` list.

Score = 1 - index / len(priority); regions not listed score 0. Does not depend on the client.
Parameters: the service's ``priority`` list.
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from director.engine.scorers import Scores


def priority_scores(ctx: DecisionContext, candidates: tuple[str, ...]) -> Scores | None:
    order = ctx.service.priority
    if not order:
        return None
    values = {
        name: 1.0 - order.index(name) / len(order) if name in order else 0.0
        for name in candidates
    }
    return Scores(values, "order " + " > ".join(order), 0)
