"""The profile handler: the outcome of a service's profile run made into the ``Decision``.

- a filter left nothing (health, or residency allowing none of the service's regions):
  the all-down behaviour (``all_down``) over the residency-kept regions in ranking order;
- otherwise spillover (``spillover``) over the ranking, then the first ``answers`` regions;
- the reason: spillover, failover (the region ranking first were all healthy was filtered
  out: ``Profile.order`` over the residency-kept regions), unknown-location (an unlocated
  client under residency rules), else primary; all-down, or refused for an unlocated client;
- the ECS scope: the client's database block when the answer depends on where the client
  is (residency rules, or a method reading its location), the scores' own scope, the
  client's bucket when spillover hashed it; the degraded TTL off the primary path or when
  an answered region is degraded or stale.
"""

from __future__ import annotations

from director.engine.all_down import all_down
from director.engine.context import DecisionContext
from director.engine.explain import filter_step, locate_step, score_step
from director.engine.inputs import LOCATED, Input
from director.engine.profiles import ServiceProfile
from director.engine.scorers import Scores
from director.engine.spillover import spillover
from director.engine.types import Decision, Step
from routing import FilterStep, Outcome, ScoreStep

RESIDENCY = "residency"  # the filter whose kept regions all-down and failover rank


def decision_of(ctx: DecisionContext, profile: ServiceProfile, outcome: Outcome[str],
                reads: frozenset[Input], explain: bool = True) -> Decision:
    """The decision for ``ctx`` from ``profile``'s explained (or traced, when not
    ``explain``: then the decision has no steps) run ``outcome``; ``reads``: what the
    service's steering methods read."""
    client, service, snapshot = ctx.client, ctx.service, ctx.snapshot
    filtered = {s.plugin: s for s in outcome.steps if isinstance(s, FilterStep)}
    steps: list[Step] = []
    if explain:
        steps.append(locate_step(client, ctx.rules, ctx.partial))
        for flt in profile.filters:  # a filter after the one that left nothing ran on nothing
            ran = filtered.get(flt.name)
            steps.append(filter_step(ran) if ran is not None
                         else Step("filter", flt.name, (), note=flt.note(ctx)))
    candidates = filtered[RESIDENCY].kept
    healthy = outcome.order

    # The answer depends on the client's location whenever residency rules exist (the
    # client was classified by it) or a method reading where the client is steers,
    # even when it had no data for this client (a client with data would rank otherwise).
    depends = service.residency or bool(LOCATED & reads)
    located = client.location.network.prefixlen if client.location and depends else 0
    floor = 0  # what the scope depends on besides the location network
    if outcome.stopped_at is not None:
        answer, step = all_down(ctx, profile.order(ctx, candidates).order, ctx.allowed is None)
        if explain:
            steps.append(step)
        reason = "all-down" if ctx.located else "refused"
        return _decision(ctx, answer, reason, located, floor, steps, degraded=True)

    for s in outcome.steps:
        if isinstance(s, ScoreStep):
            if explain:
                steps.append(score_step(s))
            if isinstance(s.values, Scores):
                floor = max(floor, s.values.scope_prefix)
    ranked, spill_step, spilled = spillover(ctx, healthy, explain)
    if service.spillover is not None and snapshot.region(ranked[0]).utilization is not None:
        floor = max(floor, client.bucket.prefixlen if ctx.key_is_client else 0)
    answer = ranked[: service.answers]
    if explain:
        assert spill_step is not None
        steps.append(spill_step)
        steps.append(Step("pick", "top-n", answer, note=f"answers {service.answers}"))
    if spilled:
        reason = "spillover"
    elif len(healthy) < len(candidates) and _preferred_down(ctx, profile, candidates, healthy):
        reason = "failover"
    elif not ctx.located and service.residency:
        reason = "unknown-location"
    else:
        reason = "primary"
    degraded = reason != "primary" or any(
        snapshot.region(r).degraded or snapshot.region(r).stale for r in answer)
    return _decision(ctx, answer, reason, located, floor, steps, degraded)


def _preferred_down(ctx: DecisionContext, profile: ServiceProfile,
                    candidates: tuple[str, ...], healthy: tuple[str, ...]) -> bool:
    """Whether the region ranked first, were all healthy, is among those filtered out."""
    ranked_all = profile.order(ctx, candidates).order
    return bool(ranked_all) and ranked_all[0] not in healthy


def _decision(ctx: DecisionContext, answer: tuple[str, ...], reason: str, located: int,
              floor: int, steps: list[Step], degraded: bool) -> Decision:
    service = ctx.service
    ttl = service.degraded_ttl if degraded else service.ttl
    scope = max(located, floor)
    return Decision(
        service=service.name, regions=tuple(answer), reason=reason,
        rules=tuple(rule.name for rule in ctx.rules), allowed=ctx.allowed, ttl=ttl,
        location_dependent=scope > 0, scope_prefix=scope, steps=tuple(steps),
        scope_floor=floor,
    )
