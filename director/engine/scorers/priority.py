"""Priority scorer: a fixed order from the service's ``priority`` list.

Score = 1 - index / len(priority); regions not listed score 0. Returns None when the service
has no priority list. Does not depend on the client (scope 0). Parameters: the service's
``priority`` list.
"""

from __future__ import annotations

from collections.abc import Sequence

from director.engine.context import DecisionContext
from director.engine.inputs import Input
from director.engine.scorers import Scores


class PriorityScorer:
    name = "priority"
    reads: frozenset[Input] = frozenset()

    def score(self, request: DecisionContext, candidates: Sequence[str]) -> Scores | None:
        order = request.service.priority
        if not order:
            return None
        values = [1.0 - order.index(name) / len(order) if name in order else 0.0
                  for name in candidates]
        return Scores(values, "order " + " > ".join(order), 0)
