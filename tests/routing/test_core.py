# SPDX-License-Identifier: Apache-2.0
"""The routing core on its own: the registry and its declared parameters, the profile
runner's three ways (lean, timed, explained) reaching one order, sampling, timings."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from routing import (
    FilterBase,
    FilterStep,
    Kind,
    Param,
    PickStep,
    PluginSpec,
    PluginTimings,
    Profile,
    Registry,
    RegistryError,
    Role,
    SampleStep,
    ScoreStep,
    TimingsCollector,
    WeightedScorer,
    lexicographic_order,
    weighted_totals,
)
from routing.plugins import Column


class Even(FilterBase[int, int]):
    name = "even"

    def check(self, request: int, candidate: int) -> str | None:
        return None if candidate % 2 == 0 else "odd"


class AtLeast(FilterBase[int, int]):
    name = "at-least"

    def check(self, request: int, candidate: int) -> str | None:
        return None if candidate >= request else f"below {request}"

    def note(self, request: int) -> str:
        return f"request {request}"


@dataclass
class Closeness:
    target: float = 0.0
    name: str = "closeness"

    def score(self, request: int, candidates: Sequence[int]) -> Sequence[float] | None:
        return [1.0 / (1.0 + abs(c - self.target)) for c in candidates]


@dataclass
class NoData:
    name: str = "no-data"

    def score(self, request: int, candidates: Sequence[int]) -> Sequence[float] | None:
        return None


@dataclass
class Highest:
    name: str = "highest"

    def order(self, candidates: Sequence[int], columns: Sequence[Column]) -> Sequence[int]:
        return lexicographic_order(columns, len(candidates))


@dataclass
class Nominate:
    wanted: int

    def preferred(self, request: int, candidates: Sequence[int]) -> list[int]:
        return [i for i, c in enumerate(candidates) if c == self.wanted]


def profile(timings: PluginTimings | None = None, **kwargs: object) -> Profile[int, int]:
    return Profile("test", (Even(), AtLeast()),
                   (WeightedScorer(Closeness(10.0), 1.0), WeightedScorer(NoData(), 5.0)),
                   Highest(), timings=timings, **kwargs)  # type: ignore[arg-type]


def test_filters_scorers_and_picker_in_order() -> None:
    outcome = profile().run(4, list(range(20)))
    assert outcome.order[:3] == (10, 8, 12)
    assert outcome.stopped_at is None and outcome.steps == ()


def test_the_emptying_filter_is_named() -> None:
    outcome = profile().run(40, list(range(20)), explain=True)
    assert outcome.order == () and outcome.stopped_at == "at-least"
    even, at_least = outcome.steps
    assert isinstance(at_least, FilterStep) and at_least.note == "request 40"
    assert at_least.dropped[18] == "below 40" and even.dropped[3] == "odd"


def test_explain_records_every_step() -> None:
    outcome = profile().run(6, list(range(12)), explain=True)
    even, _, closeness, no_data, pick = outcome.steps
    assert isinstance(even, FilterStep) and even.kept == (0, 2, 4, 6, 8, 10)
    assert isinstance(closeness, ScoreStep) and closeness.candidates == (6, 8, 10)
    assert closeness.values is not None and list(closeness.values)[2] == 1.0
    assert isinstance(no_data, ScoreStep) and no_data.values is None and no_data.weight == 5.0
    assert isinstance(pick, PickStep) and pick.order == (10, 8, 6) == outcome.order


@given(st.integers(0, 30), st.lists(st.integers(0, 40), max_size=30), st.integers(0, 6))
def test_every_run_mode_reaches_one_order(request: int, candidates: list[int],
                                                   sample: int) -> None:
    lean = profile(sample=sample, rng=random.Random(1)).run(request, candidates)
    timed = profile(PluginTimings(every=1), sample=sample, rng=random.Random(1)).run(
        request, candidates)
    explained = profile(sample=sample, rng=random.Random(1)).run(request, candidates,
                                                               explain=True)
    traced = profile(sample=sample, rng=random.Random(1)).run(request, candidates, trace=True)
    traced_timed = profile(PluginTimings(every=1), sample=sample, rng=random.Random(1)).run(
        request, candidates, trace=True)
    assert lean.order == timed.order == explained.order == traced.order == traced_timed.order
    assert lean.stopped_at == timed.stopped_at == explained.stopped_at == traced.stopped_at
    # a trace holds what each filter kept and each scorer returned, as the explained run
    assert traced.steps == traced_timed.steps
    assert [(s.plugin, s.kept) for s in traced.steps if isinstance(s, FilterStep)] == \
        [(s.plugin, s.kept) for s in explained.steps if isinstance(s, FilterStep)]
    assert [s for s in traced.steps if not isinstance(s, FilterStep)] == \
        [s for s in explained.steps if not isinstance(s, FilterStep)]


def test_sampling_falls_back_to_every_candidate_and_nominees_join() -> None:
    # 1 of 100 candidates passes; a sample of 2 rarely holds it, the fallback finds it
    only = Profile("p", (AtLeast(),), (), Highest(), sample=2, rng=random.Random(3))
    assert only.run(99, list(range(100))).order == (99,)
    nominated = Profile("p", (), (WeightedScorer(Closeness(1000.0)),), Highest(),
                        nominators=(Nominate(77),), sample=2, rng=random.Random(3))
    outcome = nominated.run(0, list(range(100)), explain=True)
    sample_step = outcome.steps[0]
    assert isinstance(sample_step, SampleStep) and sample_step.of == 100
    assert 77 in sample_step.kept and len(sample_step.kept) <= 3


def test_order_skips_filters_and_empty_calls_no_scorer() -> None:
    p = profile()
    assert p.order(100, [1, 3, 10]).order == (10, 3, 1)
    empty = p.order(0, [], explain=True)
    assert empty.order == ()
    assert [s.values for s in empty.steps if isinstance(s, ScoreStep)] == [None, None]


def test_combining_columns() -> None:
    columns: list[Column] = [([1.0, 0.5, 0.5], 2.0), (None, 9.0), ([0.0, 0.2, 0.9], 1.0)]
    assert weighted_totals(columns, 3) == [2.0, 1.2, 1.9]
    assert lexicographic_order(columns, 3) == [0, 2, 1]
    assert weighted_totals([(None, 1.0)], 2) == [0.0, 0.0]


def test_timings_sample_runs_and_export_a_histogram() -> None:
    timings = PluginTimings(every=4)
    p = profile(timings)
    for _ in range(8):
        p.run(2, list(range(10)))
    assert timings.count("filter", "even") == 2 and timings.count("picker", "highest") == 2
    registry = CollectorRegistry()
    registry.register(TimingsCollector("test_plugin_seconds", "plugin run time", timings))
    text = generate_latest(registry).decode()
    assert 'test_plugin_seconds_count{plugin="closeness",stage="scorer"} 2.0' in text
    assert 'test_plugin_seconds_bucket{le="+Inf",plugin="even",stage="filter"} 2.0' in text
    with pytest.raises(ValueError, match="every"):
        PluginTimings(every=0)


def test_explained_runs_are_timed_only_when_asked() -> None:
    timings = PluginTimings(every=2)
    for _ in range(4):
        profile(timings).run(2, list(range(10)), explain=True)
    assert timings.count("filter", "even") == 0
    timed = profile(timings, time_explained=True)
    outcomes = [timed.run(2, list(range(10)), explain=True) for _ in range(4)]
    assert timings.count("filter", "even") == 2 and timings.count("filter", "at-least") == 2
    assert timings.count("scorer", "no-data") == 2 and timings.count("picker", "highest") == 2
    assert all(outcome == outcomes[0] for outcome in outcomes)  # timed or not: one trace
    timed.run(40, list(range(10)), explain=True)  # a filter empties the set: no scorer
    timed.run(40, list(range(10)), explain=True)
    assert timings.count("filter", "at-least") == 3 and timings.count("scorer", "no-data") == 2


def make(hold: float = 0.0, window: int = 8) -> dict[str, float]:
    return {"hold": hold, "window": window}


def registry() -> Registry:
    reg = Registry()
    reg.register(PluginSpec(Kind.SCORER, "thing", make, (
        Param("hold", 0.0, low=1.0, high=3600.0, off=0.0, clamp=(1.0, 300.0)),
        Param("window", 8, low=1, integer=True),
    ), frozenset({Role.REFINER})))
    reg.freeze()
    return reg


def test_registry_builds_with_checked_and_clamped_parameters() -> None:
    reg = registry()
    built = reg.create(Kind.SCORER, "thing", {"hold": 5.0})
    assert built.plugin == {"hold": 5.0, "window": 8} and built.notes == ()
    assert built.has(Role.REFINER) and not built.has(Role.NOMINATOR)
    assert reg.create(Kind.SCORER, "thing", {"hold": 0}).plugin["hold"] == 0.0  # off
    clamped = reg.create(Kind.SCORER, "thing", {"hold": 1000.0})
    assert clamped.plugin["hold"] == 300.0 and clamped.notes == ("hold 1000 clamped to 300",)
    assert reg.create(Kind.SCORER, "thing", {"window": 3.0}).plugin["window"] == 3


@pytest.mark.parametrize(("params", "message"), [
    ({"hold": 0.5}, r"scorer 'thing': hold: 0 \(off\) or from 1 to 3600, got 0.5"),
    ({"hold": "2"}, r"hold: a number, got '2'"),
    ({"hold": True}, r"hold: a number"),
    ({"hold": float("nan")}, r"NaN"),
    ({"window": 2.5}, r"window: a whole number"),
    ({"window": 0}, r"window: at least 1"),
    ({"hodl": 1.0}, r"unknown parameter 'hodl' \(known: hold, window\); did you mean 'hold'"),
])
def test_registry_refuses_bad_parameters_by_name(params: dict[str, object],
                                                 message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        registry().create(Kind.SCORER, "thing", params)


def test_registry_is_frozen_and_names_unknown_plugins() -> None:
    reg = registry()
    with pytest.raises(RegistryError, match="frozen"):
        reg.register(PluginSpec(Kind.PICKER, "late", Highest))
    with pytest.raises(RegistryError, match=r"unknown scorer 'thin' \(known: thing\); did you"):
        reg.create(Kind.SCORER, "thin")
    fresh = Registry()
    fresh.register(PluginSpec(Kind.PICKER, "p", Highest))
    with pytest.raises(RegistryError, match="already registered"):
        fresh.register(PluginSpec(Kind.PICKER, "p", Highest))
    assert reg.names(Kind.SCORER) == ["thing"] and reg.frozen
