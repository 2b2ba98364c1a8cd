# SPDX-License-Identifier: Apache-2.0
"""The profile runner: nominators widen a sample, filters drop, scorers value, a picker
orders; the one pipeline of both routing tiers.

``Profile.run(request, candidates)`` is synchronous, no I/O, no awaits. It runs one of
three ways over the same plugins, which all reach the same order:

- lean (what every request takes): each filter's ``keep`` and each scorer's ``score`` once,
  through calls bound when the profile is built;
- timed (one run in ``timings.every``): the same, with each plugin's run time recorded in
  ``timings`` (``routing.timings``);
- explained (``explain=True``): each filter's ``check`` per candidate, so every drop has its
  reason, recorded as trace steps (``FilterStep``, ``ScoreStep``, ``PickStep``,
  ``SampleStep``) that each tier renders in its own explain format;
- traced (``trace=True``): the lean calls, recording what each filter kept and what each
  scorer returned (no drop reasons, no notes), for a caller that reads those without
  rendering an explanation; timed like a lean run.

A tier that explains runs that matter to its timings (the global tier, whose explain
answers run the engine afresh) sets ``time_explained``, so that one explained run in
``timings.every`` is timed too.

Large candidate sets: with more than ``sample`` candidates, a run first considers ``sample``
of them drawn at random with replacement (the power of k choices), plus every candidate a
nominator names, and falls back to all of them when no sampled candidate survives the
filters, so sampling never turns away what the whole set could take. ``sample = 0``
always considers every candidate.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import trunc
from time import perf_counter
from typing import Any, Generic, NamedTuple, TypeVar

from routing.plugins import Column, Filter, Nominator, Picker, Scorer
from routing.timings import PluginTimings

R = TypeVar("R")
C = TypeVar("C")


@dataclass(frozen=True)
class WeightedScorer(Generic[R, C]):
    scorer: Scorer[R, C]
    weight: float = 1.0


class FilterStep(NamedTuple):
    plugin: str
    kept: tuple[Any, ...]
    dropped: dict[Any, str]  # candidate -> reason
    note: str


class ScoreStep(NamedTuple):
    plugin: str
    weight: float
    candidates: tuple[Any, ...]
    values: Sequence[float] | None  # what the scorer returned (None: no data)


class PickStep(NamedTuple):
    plugin: str
    candidates: tuple[Any, ...]
    columns: tuple[Column, ...]
    order: tuple[Any, ...]  # the candidates the picker ordered, best first


class SampleStep(NamedTuple):
    kept: tuple[Any, ...]
    of: int


Step = FilterStep | ScoreStep | PickStep | SampleStep


class Outcome(NamedTuple, Generic[C]):
    """The candidates in the picker's order (best first; possibly only the pick) or, when a
    filter left none, ``stopped_at``: that filter's name; ``steps`` when explained."""

    order: tuple[C, ...]
    stopped_at: str | None = None
    steps: tuple[Step, ...] = ()


_new_tuple = tuple.__new__


@dataclass(frozen=True)
class Profile(Generic[R, C]):
    """One routing profile: filters in order, weighted scorers, one picker."""

    name: str
    filters: tuple[Filter[R, C], ...]
    scorers: tuple[WeightedScorer[R, C], ...]
    picker: Picker[C]
    nominators: tuple[Nominator[R, C], ...] = ()
    sample: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(0), compare=False)
    timings: PluginTimings | None = field(default=None, compare=False)
    time_explained: bool = field(default=False, compare=False)
    _keeps: tuple[tuple[Callable[..., Sequence[C]], str], ...] = field(
        init=False, repr=False, compare=False)
    _scores: tuple[tuple[Callable[..., Sequence[float] | None], float], ...] = field(
        init=False, repr=False, compare=False)
    _draws: range = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_keeps", tuple((f.keep, f.name) for f in self.filters))
        object.__setattr__(
            self, "_scores", tuple((ws.scorer.score, ws.weight) for ws in self.scorers))
        object.__setattr__(self, "_draws", range(self.sample))

    def run(self, request: R, candidates: Sequence[C], *, explain: bool = False,
            trace: bool = False) -> Outcome[C]:
        """Filter, score and order ``candidates`` for ``request``."""
        timings = self.timings
        if trace and not explain:
            run_on: Callable[[Sequence[C], R], Outcome[C]] = self._traced
            if timings is not None and timings.due():
                run_on = self._traced_timed
        elif explain:
            run_on = self._explained
            if self.time_explained and timings is not None and timings.due():
                run_on = self._explained_timed
        elif timings is not None and timings.due():
            run_on = self._timed
        else:
            run_on = self._lean
        if self.sample and len(candidates) > self.sample:
            n, rnd = len(candidates), self.rng.random
            # trunc: the same int as int(), through a cheaper call
            picked = {trunc(rnd() * n) for _ in self._draws}
            for nominator in self.nominators:
                picked.update(nominator.preferred(request, candidates))
            sampled = [candidates[i] for i in picked]
            outcome = run_on(sampled, request)
            if outcome.order:
                if explain or trace:
                    step = SampleStep(tuple(sampled), n)
                    return Outcome(outcome.order, None, (step, *outcome.steps))
                return outcome
        return run_on(candidates, request)

    def order(self, request: R, candidates: Sequence[C], *, explain: bool = False
              ) -> Outcome[C]:
        """Score and order ``candidates`` without filtering them (e.g. to say which region
        would rank first were all healthy)."""
        steps: list[Step] = []
        return Outcome(self._ordered(candidates, request, steps if explain else None),
                       None, tuple(steps))

    def _lean(self, candidates: Sequence[C], request: R) -> Outcome[C]:
        for keep, name in self._keeps:
            candidates = keep(request, candidates)
            if not candidates:
                return Outcome((), name)
        columns = [(score(request, candidates), weight) for score, weight in self._scores]
        order = self.picker.order(candidates, columns)
        if len(order) == 1:
            return _new_tuple(Outcome, ((candidates[order[0]],), None, ()))
        return _new_tuple(Outcome, (tuple([candidates[i] for i in order]), None, ()))

    def _timed(self, candidates: Sequence[C], request: R) -> Outcome[C]:
        order, stopped_at, _ = self._traced_timed(candidates, request)
        return Outcome(order, stopped_at, ())

    def _traced(self, candidates: Sequence[C], request: R,
                observe: Callable[[str, str, float], None] | None = None) -> Outcome[C]:
        steps: list[Step] = []
        for keep, name in self._keeps:
            start = perf_counter() if observe is not None else 0.0
            candidates = keep(request, candidates)
            if observe is not None:
                observe("filter", name, perf_counter() - start)
            steps.append(FilterStep(name, tuple(candidates), {}, ""))
            if not candidates:
                return Outcome((), name, tuple(steps))
        return Outcome(self._ordered(candidates, request, steps, observe), None, tuple(steps))

    def _traced_timed(self, candidates: Sequence[C], request: R) -> Outcome[C]:
        timings = self.timings
        assert timings is not None
        return self._traced(candidates, request, timings.observe)

    def _explained_timed(self, candidates: Sequence[C], request: R) -> Outcome[C]:
        timings = self.timings
        assert timings is not None
        return self._explained(candidates, request, timings.observe)

    def _explained(self, candidates: Sequence[C], request: R,
                   observe: Callable[[str, str, float], None] | None = None) -> Outcome[C]:
        steps: list[Step] = []
        for flt in self.filters:
            kept: list[C] = []
            dropped: dict[Any, str] = {}
            start = perf_counter() if observe is not None else 0.0
            for c in candidates:
                reason = flt.check(request, c)
                if reason is None:
                    kept.append(c)
                else:
                    dropped[c] = reason
            if observe is not None:
                observe("filter", flt.name, perf_counter() - start)
            steps.append(FilterStep(flt.name, tuple(kept), dropped, flt.note(request)))
            if not kept:
                return Outcome((), flt.name, tuple(steps))
            candidates = kept
        return Outcome(self._ordered(candidates, request, steps, observe), None, tuple(steps))

    def _ordered(self, candidates: Sequence[C], request: R, steps: list[Step] | None,
                 observe: Callable[[str, str, float], None] | None = None) -> tuple[C, ...]:
        """Score and order (no filters); with ``steps``, record each step; with
        ``observe``, time each plugin."""
        given = tuple(candidates)
        columns: list[Column] = []
        for ws in self.scorers:
            start = perf_counter() if observe is not None else 0.0
            values = ws.scorer.score(request, candidates) if candidates else None
            if observe is not None and candidates:
                observe("scorer", ws.scorer.name, perf_counter() - start)
            columns.append((values, ws.weight))
            if steps is not None:
                steps.append(ScoreStep(ws.scorer.name, ws.weight, given, values))
        if not candidates:
            return ()
        start = perf_counter() if observe is not None else 0.0
        order = self.picker.order(candidates, columns)
        if observe is not None:
            observe("picker", self.picker.name, perf_counter() - start)
        ordered = tuple([candidates[i] for i in order])
        if steps is not None:
            steps.append(PickStep(self.picker.name, given, tuple(columns), ordered))
        return ordered
