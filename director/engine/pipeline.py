"""The decision for one query: residency -> health -> rank -> spillover -> pick.

``Engine.decide`` is synchronous and pure over the policy and an immutable snapshot: no
I/O, no locks, no awaits; randomness (only for ``affinity none``) comes from an injected
generator. It returns the answer with the explain chain of every step.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from director.engine.affinity import client_key
from director.engine.all_down import all_down
from director.engine.classify import matching_rules
from director.engine.context import DecisionContext
from director.engine.filters.health import health_filter
from director.engine.filters.residency import allowed_regions, residency_filter
from director.engine.ranking import rank
from director.engine.registry import (
    LOCATED,
    Input,
    SteeringMethod,
    inputs_of,
    register_builtin_plugins,
)
from director.engine.snapshot import Snapshot
from director.engine.spillover import spillover
from director.engine.types import Client, Decision, Step
from policies.model import Policy, Service


class Engine:
    """Decides answers for one policy; build a new one when the policy changes."""

    def __init__(self, policy: Policy, methods: Mapping[str, SteeringMethod] | None = None,
                 rng: random.Random | None = None):
        self.policy = policy
        self.methods = methods if methods is not None else register_builtin_plugins()
        self.rng = rng or random.Random()
        self._reads = {s.name: inputs_of(self.methods, s.steer) for s in policy.services}

    def reads(self, service: Service) -> frozenset[Input]:
        """What ``service``'s steering methods read (their declarations, together)."""
        return self._reads[service.name]

    def decide(self, service: Service | str, client: Client, snapshot: Snapshot) -> Decision:
        """The regions to answer ``client`` with for ``service``, and why."""
        if isinstance(service, str):
            service = self.policy.service(service)
        location = client.location if client.location and client.location.found else None
        rules = matching_rules(self.policy, service, location)
        key, keyed = client_key(service, client, self.rng)
        ctx = DecisionContext(self.policy, service, client, snapshot, rules, key, keyed)
        steps: list[Step] = [_locate_step(client, rules)]

        allowed = allowed_regions(ctx)
        candidates, step = residency_filter(ctx, service.regions, allowed)
        steps.append(step)
        healthy, step = health_filter(ctx, candidates)
        steps.append(step)

        # The answer depends on the client's location whenever residency rules exist (the
        # client was classified by it) or a method reading where the client is steers,
        # even when it had no data for this client (a client with data would rank otherwise).
        located_steering = bool(LOCATED & self.reads(service))
        depends = service.residency or located_steering
        scope = client.location.network.prefixlen if client.location and depends else 0
        if not healthy:
            allowed_ranked = rank(ctx, candidates, self.methods)[0]
            answer, step = all_down(ctx, allowed_ranked, allowed is None)
            steps.append(step)
            reason = "all-down" if location is not None else "refused"
            return self._decision(ctx, answer, reason, allowed, scope, steps, degraded=True)

        ranked, score_steps, score_scope = rank(ctx, healthy, self.methods)
        steps += score_steps
        scope = max(scope, score_scope)
        ranked, step, spilled = spillover(ctx, ranked)
        steps.append(step)
        if service.spillover is not None and snapshot.region(ranked[0]).utilization is not None:
            scope = max(scope, client.bucket.prefixlen if keyed else 0)
        answer = ranked[: service.answers]
        steps.append(Step("pick", "top-n", answer, note=f"answers {service.answers}"))
        if spilled:
            reason = "spillover"
        elif len(healthy) < len(candidates) and self._preferred_down(ctx, candidates, healthy):
            reason = "failover"
        elif location is None and service.residency:
            reason = "unknown-location"
        else:
            reason = "primary"
        degraded = reason != "primary" or any(
            snapshot.region(r).degraded or snapshot.region(r).stale for r in answer)
        return self._decision(ctx, answer, reason, allowed, scope, steps, degraded)

    def _preferred_down(self, ctx: DecisionContext, candidates: tuple[str, ...],
                        healthy: tuple[str, ...]) -> bool:
        """Whether the region ranked first, were all healthy, is among those filtered out."""
        ranked_all = rank(ctx, candidates, self.methods)[0]
        return bool(ranked_all) and ranked_all[0] not in healthy

    def _decision(self, ctx: DecisionContext, answer: tuple[str, ...], reason: str,
                  allowed: tuple[str, ...] | None, scope: int, steps: list[Step],
                  degraded: bool) -> Decision:
        service = ctx.service
        ttl = service.degraded_ttl if degraded else service.ttl
        return Decision(
            service=service.name, regions=tuple(answer), reason=reason,
            rules=tuple(rule.name for rule in ctx.rules), allowed=allowed, ttl=ttl,
            location_dependent=scope > 0, scope_prefix=scope, steps=tuple(steps),
        )


def _locate_step(client: Client, rules) -> Step:
    location = client.location
    if location is None or not location.found:
        where = "not in the GeoIP database" if location is not None else "no location"
        note = f"{client.source} {client.network}: {where}"
    else:
        coords = (f" ({location.latitude:.2f}, {location.longitude:.2f})"
                  if location.has_coordinates else "")
        note = (f"{client.source} {client.network}: {location.country}/{location.continent}"
                f"{coords}, database network {location.network}")
    names = ", ".join(rule.name for rule in rules) or "none"
    return Step("locate", "geoip", (), note=f"{note}; residency rules: {names}")
