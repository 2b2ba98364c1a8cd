"""The decision for one query: residency -> health -> steering methods -> spillover -> pick.

``Engine.decide`` is synchronous and pure over the policy and an immutable snapshot: no
I/O, no locks, no awaits; randomness (only for ``affinity none``) comes from an injected
generator. Each service is one routing profile (``profiles``): the residency and health
filters, its steering methods as scorers, the lexicographic picker. The profile handler
(``handler``) makes the run's outcome into the answer with the explain chain of every step.
"""

from __future__ import annotations

import random

from director.engine.context import decision_context
from director.engine.handler import decision_of
from director.engine.profiles import ServiceProfile, service_profile
from director.engine.registry import (
    Input,
    SteeringMethods,
    inputs_of,
    register_builtin_plugins,
)
from director.engine.snapshot import Snapshot
from director.engine.spillover import spill_point
from director.engine.types import Client, Decision
from policies.model import Policy, Service
from routing import PluginTimings


class Engine:
    """Decides answers for one policy; build a new one when the policy changes.

    ``timings``: per-plugin run-time histograms to record into (one explained run in
    ``timings.every`` is timed), e.g. exported as ``director_engine_plugin_seconds``."""

    def __init__(self, policy: Policy, methods: SteeringMethods | None = None,
                 rng: random.Random | None = None, timings: PluginTimings | None = None):
        self.policy = policy
        self.methods = methods if methods is not None else register_builtin_plugins()
        self.rng = rng or random.Random()
        self.timings = timings
        self._reads = {s.name: inputs_of(self.methods, s.steer) for s in policy.services}
        self._profiles: dict[str, ServiceProfile] = {
            s.name: service_profile(self.methods, s, timings) for s in policy.services}

    def reads(self, service: Service) -> frozenset[Input]:
        """What ``service``'s steering methods read (their declarations, together)."""
        return self._reads[service.name]

    def decide(self, service: Service | str, client: Client, snapshot: Snapshot, *,
               explain: bool = True) -> Decision:
        """The regions to answer ``client`` with for ``service``, and why: with
        ``explain``, every step's explanation; without, the same decision with no steps,
        at about a third of the cost (what serving and the engine proof use)."""
        if isinstance(service, str):
            service = self.policy.service(service)
        ctx = decision_context(self.policy, service, client, snapshot, self.rng)
        profile = self._profiles[service.name]
        outcome = profile.run(ctx, service.regions, explain=explain, trace=not explain)
        return decision_of(ctx, profile, outcome, self._reads[service.name], explain)

    def spill_point(self, service: Service, client: Client,
                    snapshot: Snapshot) -> tuple[str, float] | None:
        """(hot primary region, spilled share) for ``client``'s ranking under ``snapshot``
        (``spillover.spill_point``), or None when it does not spill: every client ranked
        alike gets one of two decisions, by ``spill_hash(client key) < share``."""
        ctx = decision_context(self.policy, service, client, snapshot, self.rng)
        outcome = self._profiles[service.name].run(ctx, service.regions)
        if outcome.stopped_at is not None:
            return None
        return spill_point(ctx, outcome.order)
