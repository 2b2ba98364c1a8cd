# SPDX-License-Identifier: Apache-2.0
"""The regional profile: the routing core's runner (``routing.profile``) over a region's
backend views, with the extension points admission uses around it.

``Profile.run(snapshot, request)`` is the hot path: synchronous, over a ``RegionSnapshot``
of immutable backend views, no I/O, no locks, no awaits; with more than ``sample``
backends it first considers a random sample plus the backends the affinity scorers
nominate. With ``explain=True`` every step is recorded (``Decision.steps``): what each
filter dropped and why, each scorer's value per candidate, the weighted totals and the
pick. Both pick the same backend (``tests/balancer/test_fast_path.py``).

Besides filters, scorers and a picker, a profile carries the plugins that fill the
regional extension points, as their registry entries declare them: ``refiners`` size a
request before it is routed, ``hold_policies`` may keep it waiting for a better backend,
``bind_observers`` learn where it went, and ``waits_at`` names the filters whose drops
mean "no room now" (the request waits in the region queue) rather than "never".
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from regions.balancer.types import (
    BackendSnapshot,
    Filter,
    Picker,
    RegionSnapshot,
    RequestInfo,
)
from routing import (
    BindObserver,
    FilterStep,
    HoldPolicy,
    PickStep,
    Refiner,
    SampleStep,
    ScoreStep,
    WeightedScorer,
    weighted_totals,
)
from routing import Profile as CoreProfile
from routing import Step as CoreStep


class Decision(NamedTuple):
    """The outcome of one run: ``chosen`` or, if none, ``stopped_at`` (the emptying filter).

    A named tuple rather than a frozen dataclass: every request builds one, and a tuple is
    several times cheaper to build (a frozen dataclass sets each field through
    ``object.__setattr__``)."""

    chosen: BackendSnapshot | None
    stopped_at: str | None = None
    steps: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen.name if self.chosen else None,
            "stopped_at": self.stopped_at,
            "steps": list(self.steps),
        }


_new_tuple = tuple.__new__


@dataclass(frozen=True)
class Profile:
    """One regional profile: the core profile and the plugins of each extension point."""

    core: CoreProfile[RequestInfo, BackendSnapshot]
    refiners: tuple[Refiner[RequestInfo], ...] = ()
    hold_policies: tuple[HoldPolicy[RequestInfo, BackendSnapshot], ...] = ()
    bind_observers: tuple[BindObserver[RequestInfo, BackendSnapshot], ...] = ()
    waits_at: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()  # parameters clamped when it was built

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def filters(self) -> tuple[Filter, ...]:
        return self.core.filters

    @property
    def scorers(self) -> tuple[WeightedScorer[RequestInfo, BackendSnapshot], ...]:
        return self.core.scorers

    @property
    def picker(self) -> Picker:
        return self.core.picker

    @property
    def sample(self) -> int:
        return self.core.sample

    @property
    def rng(self) -> random.Random:
        return self.core.rng

    def run(
        self, snapshot: RegionSnapshot, request: RequestInfo, *, explain: bool = False
    ) -> Decision:
        outcome = self.core.run(request, snapshot.backends, explain=explain)
        order = outcome.order
        if explain:
            steps = tuple(_rendered(step) for step in outcome.steps)
            return Decision(order[0] if order else None, outcome.stopped_at, steps)
        if order:
            return _new_tuple(Decision, (order[0], None, ()))  # without Decision's __new__
        return Decision(None, outcome.stopped_at)


def _names(backends: Sequence[BackendSnapshot]) -> list[str]:
    return [b.name for b in backends]


def _rendered(step: CoreStep) -> dict[str, Any]:
    """One trace step in the balancer's explain format."""
    if isinstance(step, SampleStep):
        return {"stage": "sample", "kept": _names(step.kept), "of": step.of}
    if isinstance(step, FilterStep):
        return {"stage": "filter", "plugin": step.plugin, "kept": _names(step.kept),
                "dropped": {b.name: reason for b, reason in step.dropped.items()}}
    if isinstance(step, ScoreStep):
        values = step.values or ()
        return {"stage": "scorer", "plugin": step.plugin, "weight": step.weight,
                "scores": {b.name: round(v, 6)
                           for b, v in zip(step.candidates, values, strict=True)}}
    assert isinstance(step, PickStep)
    totals = weighted_totals(step.columns, len(step.candidates))
    return {"stage": "picker", "plugin": step.plugin,
            "totals": {b.name: round(t, 6) for b, t in zip(step.candidates, totals, strict=True)},
            "chosen": step.order[0].name}
