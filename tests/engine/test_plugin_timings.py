"""The engine times its plugins one decision in ``every`` (``routing.PluginTimings``), by
stage and plugin name, and a timed decision is the same decision."""

from __future__ import annotations

import random

from decision_corpus import cases, client, policies

from director.engine import Engine, Snapshot
from routing import PluginTimings


def test_every_plugin_is_timed_by_stage_and_name() -> None:
    policy = policies()["every-feature"]
    timings = PluginTimings(every=1)
    engine = Engine(policy, timings=timings)
    for service in policy.services:
        engine.decide(service, client("us-ny"), Snapshot())
    for stage, plugin in [("filter", "residency"), ("filter", "health"),
                          ("scorer", "latency"), ("scorer", "geo"), ("scorer", "weighted"),
                          ("scorer", "priority"), ("picker", "lexicographic")]:
        assert timings.count(stage, plugin) >= 1, (stage, plugin)
    assert timings.count("filter", "residency") == len(policy.services)


def test_one_decision_in_every_is_timed_and_decides_alike() -> None:
    policy = policies()["every-feature"]
    timings = PluginTimings(every=4)
    timed = Engine(policy, rng=random.Random(1), timings=timings)
    plain = Engine(policy, rng=random.Random(1))
    decided = 0
    for service, _, _, who, snapshot in list(cases("every-feature", policy))[:400]:
        assert timed.decide(service, who, snapshot) == plain.decide(service, who, snapshot)
        decided += 1
    assert timings.count("filter", "residency") == decided // 4
