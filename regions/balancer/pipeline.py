# SPDX-License-Identifier: Apache-2.0
"""The scheduling pipeline: filters drop, weighted scorers rank, a picker chooses.

``Profile.run(snapshot, request)`` is the hot path: synchronous, over a frozen
``RegionSnapshot``, no I/O, no locks, no awaits. With ``explain=True`` the same code path
also records every step as data (``Decision.steps``): what each filter dropped and why,
each scorer's value per candidate, the weighted totals and the pick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from regions.balancer.types import (
    BackendSnapshot,
    Filter,
    Picker,
    RegionSnapshot,
    RequestInfo,
    Scorer,
)


@dataclass(frozen=True)
class WeightedScorer:
    scorer: Scorer
    weight: float = 1.0


@dataclass(frozen=True)
class Decision:
    """The outcome of one run: ``chosen`` or, if none, ``stopped_at`` (the emptying filter)."""

    chosen: BackendSnapshot | None
    stopped_at: str | None = None
    steps: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen.name if self.chosen else None,
            "stopped_at": self.stopped_at,
            "steps": list(self.steps),
        }


@dataclass(frozen=True)
class Profile:
    """One scheduling profile: filters in order, weighted scorers, one picker."""

    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def run(
        self, snapshot: RegionSnapshot, request: RequestInfo, *, explain: bool = False
    ) -> Decision:
        steps: list[dict[str, Any]] = []
        candidates: Sequence[BackendSnapshot] = snapshot.backends
        for flt in self.filters:
            kept: list[BackendSnapshot] = []
            dropped: dict[str, str] = {}
            for b in candidates:
                reason = flt.check(request, b)
                if reason is None:
                    kept.append(b)
                elif explain:
                    dropped[b.name] = reason
            if explain:
                steps.append(
                    {
                        "stage": "filter",
                        "plugin": flt.name,
                        "kept": [b.name for b in kept],
                        "dropped": dropped,
                    }
                )
            if not kept:
                return Decision(None, flt.name, tuple(steps))
            candidates = kept
        totals = [0.0] * len(candidates)
        for ws in self.scorers:
            values = ws.scorer.score(request, candidates)
            for i, v in enumerate(values):
                totals[i] += ws.weight * v
            if explain:
                steps.append(
                    {
                        "stage": "scorer",
                        "plugin": ws.scorer.name,
                        "weight": ws.weight,
                        "scores": {
                            b.name: round(v, 6) for b, v in zip(candidates, values, strict=True)
                        },
                    }
                )
        index = self.picker.pick(candidates, totals)
        chosen = candidates[index]
        if explain:
            steps.append(
                {
                    "stage": "picker",
                    "plugin": self.picker.name,
                    "totals": {
                        b.name: round(t, 6) for b, t in zip(candidates, totals, strict=True)
                    },
                    "chosen": chosen.name,
                }
            )
        return Decision(chosen, None, tuple(steps))
