"""What to answer when every allowed region is down: the policy's required all-down rule.

- a client under residency rules: the strictest of its rules (any ``answer-nothing`` wins;
  ``fallback`` regions are intersected with the allowed set, so even a policy loaded without
  the proof cannot cross a border here; ``answer-allowed`` answers the allowed regions anyway);
- a client of unknown location (or a partial one under ``partial-location unknown``):
  nothing (fail closed);
- any other client: the service's own ``all-down``.
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from director.engine.types import Step
from policies.model import AllDown, AllDownKind


def all_down(ctx: DecisionContext, allowed_ranked: tuple[str, ...],
             unrestricted: bool) -> tuple[tuple[str, ...], Step]:
    if not ctx.located:
        return (), Step("all-down", "all-down", (), note="client location unknown: answer nothing")
    behaviours = [rule.all_down for rule in ctx.rules] if ctx.rules else [ctx.service.all_down]
    if any(b.kind is AllDownKind.ANSWER_NOTHING for b in behaviours):
        return (), Step("all-down", "all-down", (), note="answer-nothing: fail closed")
    answer: list[str] = []
    for behaviour in behaviours:
        answer += _answer(behaviour, allowed_ranked, unrestricted)
    kept = tuple(dict.fromkeys(r for r in answer if unrestricted or r in allowed_ranked))
    kinds = ", ".join(sorted({b.kind.value for b in behaviours}))
    return kept, Step("all-down", "all-down", kept, note=f"{kinds}: answering regardless of health")


def _answer(behaviour: AllDown, allowed_ranked: tuple[str, ...],
            unrestricted: bool) -> tuple[str, ...]:
    if behaviour.kind is AllDownKind.FALLBACK:
        return behaviour.regions
    return allowed_ranked
