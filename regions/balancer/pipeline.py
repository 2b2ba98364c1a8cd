# SPDX-License-Identifier: Apache-2.0
"""The scheduling pipeline: filters drop, weighted scorers rank, a picker chooses.

``Profile.run(snapshot, request)`` is the hot path: synchronous, over a ``RegionSnapshot``
of immutable backend views, no I/O, no locks, no awaits; each filter and scorer makes one
pass over the candidates (``Filter.keep``). With ``explain=True`` the same steps run
through each filter's ``check``, which says why, and are recorded as data
(``Decision.steps``): what each filter dropped and why, each scorer's value per candidate,
the weighted totals and the pick. Both pick the same backend
(``tests/balancer/test_fast_path.py``).

Large regions: with more than ``sample`` backends, a run first considers ``sample`` of them
drawn at random, with replacement (the power of k choices: with k = 8 the pick is nearly as
good as over all of them, at a cost that does not grow with the region) and falls back to
all of them when no sampled backend can take the request, so sampling never turns a
servable request away or makes it wait. ``sample = 0`` always considers every backend.
Scorers that favour particular backends whatever their load (prefix and session
affinity) name them (``Preferring.preferred``) and those join the sample, so affinity
does not miss its backend in a large region.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import trunc
from typing import Any, NamedTuple, Protocol, runtime_checkable

from regions.balancer.types import (
    BackendSnapshot,
    Filter,
    Picker,
    RegionSnapshot,
    RequestInfo,
    Scorer,
)


@runtime_checkable
class Preferring(Protocol):
    """A scorer that favours particular backends (by affinity, not load)."""

    def preferred(self, request: RequestInfo, backends: Sequence[BackendSnapshot]) -> list[int]:
        """Indices into ``backends`` this scorer would favour for ``request``."""
        ...


@dataclass(frozen=True)
class WeightedScorer:
    scorer: Scorer
    weight: float = 1.0


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
    """One scheduling profile: filters in order, weighted scorers, one picker."""

    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    sample: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(0), compare=False)
    _preferring: tuple[Preferring, ...] = field(init=False, repr=False, compare=False)
    # the lean run's calls, bound once: (keep, name) per filter, (score, weight) per scorer
    _keeps: tuple[tuple[Callable[..., Sequence[BackendSnapshot]], str], ...] = field(
        init=False, repr=False, compare=False)
    _scores: tuple[tuple[Callable[..., list[float]], float], ...] = field(
        init=False, repr=False, compare=False)
    _draws: range = field(init=False, repr=False, compare=False)  # range(sample)

    def __post_init__(self) -> None:
        preferring = tuple(ws.scorer for ws in self.scorers if isinstance(ws.scorer, Preferring))
        object.__setattr__(self, "_preferring", preferring)
        object.__setattr__(self, "_keeps", tuple((f.keep, f.name) for f in self.filters))
        object.__setattr__(
            self, "_scores", tuple((ws.scorer.score, ws.weight) for ws in self.scorers))
        object.__setattr__(self, "_draws", range(self.sample))

    def run(
        self, snapshot: RegionSnapshot, request: RequestInfo, *, explain: bool = False
    ) -> Decision:
        run_on = self._explained if explain else self._pick
        backends = snapshot.backends
        if self.sample and len(backends) > self.sample:
            n, rnd = len(backends), self.rng.random
            # trunc: the same int as int(), through a cheaper call
            picked = {trunc(rnd() * n) for _ in self._draws}
            for preferring in self._preferring:
                picked.update(preferring.preferred(request, backends))
            sampled = [backends[i] for i in picked]
            decision = run_on(sampled, request)
            if decision.chosen is not None:
                if explain:
                    step = {"stage": "sample", "kept": [b.name for b in sampled],
                            "of": len(backends)}
                    return Decision(decision.chosen, None, (step, *decision.steps))
                return decision
        return run_on(backends, request)

    def _explained(self, backends: Sequence[BackendSnapshot], request: RequestInfo) -> Decision:
        """One run that records every step (``explain``): each filter's verdict and reason
        per backend, each scorer's values, the totals and the pick."""
        steps: list[dict[str, Any]] = []
        candidates: Sequence[BackendSnapshot] = backends
        for flt in self.filters:
            kept: list[BackendSnapshot] = []
            dropped: dict[str, str] = {}
            for b in candidates:
                reason = flt.check(request, b)
                if reason is None:
                    kept.append(b)
                else:
                    dropped[b.name] = reason
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
        steps.append(
            {
                "stage": "picker",
                "plugin": self.picker.name,
                "totals": {b.name: round(t, 6) for b, t in zip(candidates, totals, strict=True)},
                "chosen": chosen.name,
            }
        )
        return Decision(chosen, None, tuple(steps))

    def _pick(self, candidates: Sequence[BackendSnapshot], request: RequestInfo) -> Decision:
        """The same run without the record: what every request takes (kept lean: each
        filter and scorer makes one pass over the candidates, through calls bound once)."""
        for keep, name in self._keeps:
            candidates = keep(request, candidates)
            if not candidates:
                return Decision(None, name)
        totals = _weighted_totals(
            [(score(request, candidates), weight) for score, weight in self._scores],
            len(candidates),
        )
        chosen = candidates[self.picker.pick(candidates, totals)]
        return _new_tuple(Decision, (chosen, None, ()))  # Decision(chosen), without its __new__


def _weighted_totals(scored: list[tuple[list[float], float]], n: int) -> list[float]:
    """``sum(weight * value)`` per candidate, added left to right from the first scorer's
    product: ``((w0 * a + w1 * b) + w2 * c)``, the same floats as a running total from the
    first term. One pass for up to three scorers (the default profile has three)."""
    if not scored:
        return [0.0] * n
    if len(scored) == 1:
        [(a, wa)] = scored
        return [wa * x for x in a]
    if len(scored) == 2:
        (a, wa), (b, wb) = scored
        return [wa * x + wb * y for x, y in zip(a, b, strict=False)]
    (a, wa), (b, wb), (c, wc) = scored[:3]
    totals = [wa * x + wb * y + wc * z for x, y, z in zip(a, b, c, strict=False)]
    for values, weight in scored[3:]:
        totals = [t + weight * v for t, v in zip(totals, values, strict=False)]
    return totals
