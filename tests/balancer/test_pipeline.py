# SPDX-License-Identifier: Apache-2.0
"""The pipeline runner and the registry."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regions.balancer.errors import BalancerConfigError
from regions.balancer.scheduling.registry import (
    DEFAULT_SCORERS,
    Registry,
    build_profile,
    register_builtin_plugins,
)
from regions.balancer.types import RegionSnapshot
from routing import Kind, PluginSpec, RegistryError
from tests.balancer.helpers import req, snap


def profile(scorers=DEFAULT_SCORERS, rng=None):
    return build_profile(register_builtin_plugins(Registry()), rng=rng or random.Random(0),
                         scorers=scorers)


SPEED_AWARE = (("size-aware", 8.0), ("outstanding-work", 2.0), ("least-requests", 1.0))


def test_picks_fast_idle_backend_and_explains() -> None:
    region = RegionSnapshot(
        (
            snap("slow", 0, tokens_per_s=20.0),
            snap("fast", 1, tokens_per_s=80.0),
            snap("other", 2, models=frozenset({"x"})),
        ),
        1,
    )
    decision = profile(SPEED_AWARE).run(region, req(), explain=True)
    assert decision.chosen is not None and decision.chosen.name == "fast"
    steps = decision.to_json()["steps"]
    assert [s["plugin"] for s in steps] == [
        "model",
        "revision",
        "health",
        "not-tried",
        "capacity",
        "size-aware",
        "outstanding-work",
        "least-requests",
        "max-score",
    ]
    assert steps[0]["dropped"] == {"other": "does not serve model 'sim-model'"}
    assert steps[-1]["chosen"] == "fast"


@pytest.mark.parametrize(
    ("backends", "stopped_at"),
    [
        ([snap(models=frozenset({"x"}))], "model"),
        ([snap(draining=True)], "health"),
        ([snap(in_flight=4, cap=4)], "capacity"),
    ],
    ids=["no-model", "all-draining", "all-full"],
)
def test_reports_the_filter_that_emptied_the_set(backends, stopped_at) -> None:
    decision = profile().run(RegionSnapshot(tuple(backends), 1), req())
    assert decision.chosen is None
    assert decision.stopped_at == stopped_at


def test_hot_path_builds_no_explanation() -> None:
    decision = profile().run(RegionSnapshot((snap(),), 1), req())
    assert decision.steps == ()


def test_registry_is_frozen_and_names_unknown_plugins() -> None:
    registry = register_builtin_plugins(Registry())
    with pytest.raises(RegistryError, match="frozen"):
        registry.register(PluginSpec(Kind.FILTER, "x", object))
    with pytest.raises(BalancerConfigError, match="unknown picker 'nope'"):
        build_profile(registry, picker="nope")
    assert registry.names(Kind.PICKER) == [
        "max-score", "power-of-two", "round-robin", "weighted-random"
    ]


def test_scorer_params_reach_the_scorer_and_bad_ones_are_named() -> None:
    registry = register_builtin_plugins(Registry())
    built = build_profile(registry, scorers=SPEED_AWARE,
                          scorer_params={"size-aware": {"hold": 0.25, "lead": 1.0}})
    size_aware = next(ws.scorer for ws in built.scorers if ws.scorer.name == "size-aware")
    assert (size_aware.hold, size_aware.lead) == (0.25, 1.0)
    with pytest.raises(BalancerConfigError, match=r"size-aware.*nope"):
        build_profile(registry, scorers=SPEED_AWARE, scorer_params={"size-aware": {"nope": 1.0}})
    with pytest.raises(BalancerConfigError, match=r"size-aware.*kappa"):
        build_profile(registry, scorers=SPEED_AWARE,
                      scorer_params={"size-aware": {"kappa": 0.5}})
    with pytest.raises(BalancerConfigError, match=r"not in it.*latency-ewma"):
        build_profile(registry, scorer_params={"latency-ewma": {"alpha": 0.5}})


def test_the_default_profile_is_least_requests_and_prefix_affinity_behind_the_filters(
) -> None:
    region = RegionSnapshot((snap("a", 0, in_flight=3), snap("b", 1, in_flight=1, cap=2),
                             snap("c", 2, in_flight=2)), 1)
    decision = profile().run(region, req(), explain=True)
    steps = decision.to_json()["steps"]
    assert [s["plugin"] for s in steps] == [
        "model", "revision", "health", "not-tried", "capacity", "least-requests",
        "prefix-affinity", "max-score"]
    assert decision.chosen is not None and decision.chosen.name == "b"  # fewest, not freest


@settings(max_examples=200)
@given(loads=st.lists(st.integers(0, 40), min_size=1, max_size=8),
       prefix=st.lists(st.integers(), max_size=6), seed=st.integers(0, 1000))
def test_without_a_shared_prefix_the_default_orders_as_least_requests_alone(
        loads, prefix, seed) -> None:
    """Nothing held: prefix-affinity scores nothing, and the default picks what
    least-requests alone picks, tie-breaks included."""
    region = RegionSnapshot(tuple(snap(f"b{i}", i, in_flight=f, cap=64)
                                  for i, f in enumerate(loads)), 1)
    request = req(prefix=tuple(prefix))
    with_affinity = profile(rng=random.Random(seed)).run(region, request)
    alone = profile((("least-requests", 1.0),), rng=random.Random(seed)).run(region, request)
    assert with_affinity.chosen == alone.chosen
