# SPDX-License-Identifier: Apache-2.0
"""Checks and guards judged over synthetic event streams."""

from __future__ import annotations

from pathlib import Path

import pytest

from drills.checks import Judge, windows_of
from drills.guards import Guards
from drills.loader import load_drill_text
from drills.model import When
from drills.records import AttemptOutcome as A
from drills.records import StatusSample
from tests.drills.synthetic import attempt, fault, ok, region_of, request

DRILL = """\
apiVersion: drill/v1
kind: Drill
metadata: {name: judged}
load:
  service: chat
  request: {model: m}
  rate: {rps: 10}
  phases: [{name: a, duration: 10s}, {name: b, duration: 20s}, {name: c, duration: 10s}]
  cohorts:
    - {name: eu, countries: [DE], residency: {jurisdictions: [EU]}, share: 0.5}
    - {name: us, countries: [US], share: 0.5}
targets:
  eu_west: {kind: region, select: {region: eu-west}}
method:
  - {id: kill, type: region.kill, target: eu_west, start: 10s, duration: 20s}
checks:
  - {name: residency, type: residency}
  - {name: lost, type: lost}
  - {name: lost-but-at-fault, type: lost, exclude_in_flight_at_fault: true}
  - {name: lost-ratio, type: lost, expect: {max_ratio: 0.05}}
  - {name: shed, type: shed_ratio, expect: {max: 0.1}}
  - {name: completed, type: completed, cohorts: [us], expect: {min: 0.99}}
  - {name: ttft, type: ttft, quantile: 0.99, expect: {max: 1s}}
  - {name: ttft-vs-us, type: ttft, cohorts: [eu], quantile: 0.5,
     compare_to: {cohort: us, max_ratio: 2}}
  - {name: failover, type: failover_time, fault: kill, cohorts: [eu], expect: {max: 10s}}
  - {name: back, type: traffic_share, when: after, regions: [eu-west], expect: {min: 0.5}}
  - {name: healthy, type: region_health, when: before, healthy: [eu-west, us-east]}
guards:
  stop_when:
    - {name: budget, type: error_ratio, window: 5s, expect: {max: 0.2}, failure_threshold: 2}
    - {check: residency}
    - {name: switch, type: kill_switch, file: SWITCH}
"""
EU = frozenset({"eu-west", "eu-central"})
KILL = fault("kill", "region.kill", start=10.0, end=30.0, regions=("eu-west",))


@pytest.fixture
def drill(tmp_path: Path):
    return load_drill_text(DRILL.replace("SWITCH", str(tmp_path / "stop")), "judged.yaml")


@pytest.fixture
def judge(drill) -> Judge:
    return Judge(drill, {"eu": EU, "us": None}, region_of, ("us-east", "eu-west", "eu-central"))


def healthy_run():
    """EU on eu-west, moved to eu-central 3 s into the kill, back after it; US untouched."""
    records = []
    for i in range(400):
        t = i / 10
        eu_region = "eu-central" if 13.0 <= t < 30.0 else "eu-west"
        records.append(ok("eu", t, eu_region, ttft=0.2))
        records.append(ok("us", t, "us-east", ttft=0.1))
    return records


def evaluate(judge: Judge, name: str, records, status=None):
    check = next(c for c in judge.drill.checks if c.name == name)
    return judge.evaluate(check, records, [KILL], 40.0, status)


@pytest.mark.parametrize("name", ["residency", "lost", "lost-but-at-fault", "lost-ratio",
                                  "shed", "completed", "ttft", "ttft-vs-us", "failover",
                                  "back"])
def test_a_healthy_run_passes_every_check(judge: Judge, name: str) -> None:
    result = evaluate(judge, name, healthy_run())
    assert result.passed, result.detail


def test_failover_value_is_measured(judge: Judge) -> None:
    result = evaluate(judge, "failover", healthy_run())
    assert result.value == pytest.approx(3.0, abs=0.11)
    assert "eu" in result.data


def test_one_violation_fails_residency_with_its_evidence(judge: Judge) -> None:
    records = [*healthy_run(), request("eu", 20, attempt("us-east", A.COMPLETED, t=20))]
    result = evaluate(judge, "residency", records)
    assert not result.passed and result.value == 2.0  # DNS answer and the served header
    assert "us-east" in result.evidence[0]


def test_stream_cut_by_the_kill_is_lost_unless_excluded(judge: Judge) -> None:
    records = [*healthy_run(), request("eu", 9.9, attempt("eu-west", A.STREAM_CUT, t=9.9))]
    assert not evaluate(judge, "lost", records).passed
    excluded = evaluate(judge, "lost-but-at-fault", records)
    assert excluded.passed and "in flight where the fault hit" in excluded.detail
    assert evaluate(judge, "lost-ratio", records).passed  # 1 in 801


def test_shed_ratio_counts_shed_and_recovered(judge: Judge) -> None:
    shed = [request("us", 15 + i / 10, attempt("us-east", A.SHED, t=15, retry_after=1),
                    attempt("us-east", A.COMPLETED, t=16, n=1)) for i in range(100)]
    result = evaluate(judge, "shed", healthy_run() + shed)
    assert not result.passed and result.value == pytest.approx(100 / 500)
    assert evaluate(judge, "completed", healthy_run() + shed).passed  # they all completed


def test_slow_ttft_and_a_relative_bound(judge: Judge) -> None:
    slow = [ok("eu", 10 + i / 15, "eu-central", ttft=0.5) for i in range(300)]
    result = evaluate(judge, "ttft-vs-us", healthy_run() + slow)
    assert not result.passed and result.data["ratio"] == pytest.approx(5.0)


def test_traffic_that_never_moved_fails_failover(judge: Judge) -> None:
    records = [ok("eu", i / 10, "eu-west") for i in range(400)]
    result = evaluate(judge, "failover", records)
    assert not result.passed and result.value is None


def test_region_health_reads_the_status_sample(judge: Judge) -> None:
    good = StatusSample(10, True, {"eu-west": {"healthy": True}, "us-east": {"healthy": True}})
    bad = StatusSample(10, True, {"eu-west": {"healthy": False}, "us-east": {"healthy": True}})
    assert evaluate(judge, "healthy", [], good).passed
    result = evaluate(judge, "healthy", [], bad)
    assert not result.passed and "eu-west is not healthy" in result.detail
    assert not evaluate(judge, "healthy", [], StatusSample(10, False)).passed


def test_a_ratio_with_nothing_to_judge_fails(judge: Judge) -> None:
    result = evaluate(judge, "completed", [])
    assert not result.passed and "no terminal request" in result.detail


def test_windows_follow_the_faults_as_injected(drill) -> None:
    late = fault("kill", start=12.5, end=31.0)
    w = windows_of(drill, [late])
    assert w.of(When.BEFORE) == (0.0, 12.5)
    assert w.of(When.DURING) == (12.5, 31.0)
    assert w.of(When.AFTER) == (31.0, 40.0)


def test_error_budget_guard_fires_after_its_threshold(judge: Judge) -> None:
    guards = Guards(judge.drill.guards, judge.drill.checks, judge)
    records = healthy_run()[:200]  # t < 10
    assert guards.evaluate(records, [KILL], 10.0) is None
    failing = [request("us", 10 + i / 20, attempt("us-east", A.HTTP_5XX, t=10 + i / 20))
               for i in range(100)]
    assert guards.evaluate(records + failing, [KILL], 14.0) is None  # 1 of 2
    fired = guards.evaluate(records + failing, [KILL], 15.0)
    assert fired is not None and fired.guard == "budget"
    assert "lost ratio" in fired.detail


def test_check_guard_and_kill_switch(judge: Judge, tmp_path: Path) -> None:
    guards = Guards(judge.drill.guards, judge.drill.checks, judge)
    assert guards.evaluate(healthy_run(), [KILL], 5.0) is None
    (tmp_path / "stop").write_text("")
    fired = guards.evaluate(healthy_run(), [KILL], 6.0)
    assert fired is not None and fired.guard == "switch"
    guards = Guards(judge.drill.guards, judge.drill.checks, judge)
    leak = request("eu", 4, attempt("us-east", A.COMPLETED, t=4))
    fired = guards.evaluate([leak], [KILL], 6.0)
    assert fired is not None and fired.guard == "residency"
