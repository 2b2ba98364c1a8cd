"""Rank candidates by the service's steering methods, in the order the policy lists them.

Each method's scorer either scores every candidate or has no data (None). Candidates are
ordered by the tuple of available scores, first method first (a later method only breaks
ties of the earlier ones), then by policy order.
"""

from __future__ import annotations

from collections.abc import Mapping

from director.engine.context import DecisionContext
from director.engine.registry import SteeringMethod
from director.engine.types import Step


def rank(ctx: DecisionContext, candidates: tuple[str, ...],
         methods: Mapping[str, SteeringMethod]) -> tuple[tuple[str, ...], list[Step], int]:
    """Ranked candidates, one explain step per method, and the ECS scope they depend on."""
    steps: list[Step] = []
    keys: dict[str, list[float]] = {name: [] for name in candidates}
    scope = 0
    for method in ctx.service.steer:
        scores = methods[method].score(ctx, candidates) if candidates else None
        if scores is None:
            steps.append(Step("score", method, candidates, note="no data for this client"))
            continue
        for name in candidates:
            keys[name].append(scores.values[name])
        scope = max(scope, scores.scope_prefix)
        shown = ", ".join(f"{n}={scores.values[n]:.3f}" for n in candidates)
        steps.append(Step("score", method, candidates, note=f"{scores.note}; scores {shown}"))
    order = {name: index for index, name in enumerate(candidates)}
    ranked = tuple(sorted(candidates, key=lambda n: ([-v for v in keys[n]], order[n])))
    return ranked, steps, scope
