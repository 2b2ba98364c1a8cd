# SPDX-License-Identifier: Apache-2.0
"""Model-lifecycle drill faults (a bad revision's short answers, a silent revision swap, a
rollout) as admin API calls with their undo, and the rollout check over status samples."""

from __future__ import annotations

import asyncio

import pytest

from drills.checks import Judge
from drills.errors import DrillFileError
from drills.faults import Injector, Resolved, plan_fault, rollout_id
from drills.loader import load_drill_text
from drills.records import FaultRecord, StatusSample
from tests.drills.synthetic import fault, region_of

DRILL = """\
apiVersion: drill/v1
kind: Drill
metadata: {name: lifecycle}
load:
  service: chat
  request: {model: m}
  rate: {rps: 10}
  phases: [{name: a, duration: 10s}, {name: b, duration: 40s}]
  cohorts: [{name: eu, countries: [DE], residency: {jurisdictions: [EU]}, share: 1}]
targets:
  cand: {kind: gpu, select: {region: eu-west, gpu: c}}
method:
  - {id: short, type: gpu.short, target: cand, start: {phase: b}, duration: 30s}
  - {id: swap, type: gpu.swap, target: cand, start: {phase: b}, duration: 30s,
     params: {model: m, root: /weights/other}}
  - id: canary
    type: rollout.start
    start: {phase: b}
    duration: 30s
    params: {model: m, baseline: r1, candidate: r2, steps: [25, 100], interval: 10s,
             regions: [eu-west], gates: {ttft-p95: 1.25}, min_samples: 10}
checks:
  - {name: residency, type: residency}
  - {name: back, type: rollout, fault: canary, status: rolled-back, expect: {max: 20s}}
  - {name: done, type: rollout, fault: canary, status: completed, expect: {max: 30s}}
"""


@pytest.fixture
def drill():
    return load_drill_text(DRILL, "lifecycle.yaml")


def test_each_fault_is_a_call_with_its_undo(drill) -> None:
    gpus = Resolved(regions=("eu-west",), gpus=(("eu-west", "c"),))
    short, swap, canary = (plan_fault(f, gpus if f.target else Resolved(), 40.0)
                           for f in drill.faults)
    op = short.operations[0]
    assert (op.inject.path, op.inject.body) == (
        "/api/v1/chaos/gpus/eu-west/c/fault", {"mode": "short", "ttl": 40.0, "factor": 0.3})
    assert op.restore.body == {"mode": "none"}
    op = swap.operations[0]
    assert (op.inject.path, op.inject.body) == (
        "/api/v1/chaos/gpus/eu-west/c/root", {"model": "m", "root": "/weights/other",
                                               "ttl": 40.0})
    assert op.restore.body == {"model": "m", "restore": True}
    op = canary.operations[0]
    assert op.inject.method == "POST" and op.inject.path == "/api/v1/rollouts"
    assert op.inject.body == {
        "id": "drill-canary", "model": "m", "baseline": "r1", "candidate": "r2",
        "steps": [25, 100], "interval_s": 10.0, "regions": ["eu-west"],
        "gates": [{"name": "ttft-p95", "threshold": 1.25, "min_samples": 10}]}
    assert (op.restore.method, op.restore.path) == (
        "DELETE", "/api/v1/rollouts/drill-canary?abort=true")


@pytest.mark.parametrize(("check", "message"), [
    ("{name: x, type: rollout, fault: nope, status: completed, expect: {max: 5s}}",
     "needs the rollout.start fault"),
    ("{name: x, type: rollout, fault: canary, expect: {max: 5s}}", "needs the status"),
    ("{name: x, type: rollout, fault: canary, status: completed}", "expect: {max"),
    ("{name: x, type: rollout, fault: canary, status: done, expect: {max: 5s}}",
     "rolled-back"),
])
def test_a_rollout_check_needs_its_fault_status_and_bound(check: str, message: str) -> None:
    text = DRILL.replace(
        "  - {name: back, type: rollout, fault: canary, status: rolled-back, "
        "expect: {max: 20s}}", f"  - {check}")
    with pytest.raises(DrillFileError, match=message):
        load_drill_text(text, "lifecycle.yaml")


def samples(*states: tuple[float, str, float]) -> list[StatusSample]:
    return [StatusSample(t, True, {}, rollouts={rollout_id("canary"): {
        "status": status, "percent": percent, "reason": "ttft-p95 2.1x"}})
            for t, status, percent in states]


def judged(drill, name: str, seen: list[StatusSample]):
    judge = Judge(drill, {"eu": None}, region_of, ("eu-west",), samples=seen)
    check = next(c for c in drill.checks if c.name == name)
    return judge.evaluate(check, [], [fault("canary", "rollout.start", 10.0, 40.0)], 50.0)


def test_the_rollout_check_times_the_status_from_the_rollouts_start(drill) -> None:
    seen = samples((11, "running", 25), (21, "running", 25), (24, "rolled-back", 0),
                   (30, "rolled-back", 0))
    result = judged(drill, "back", seen)
    assert result.passed and result.value == pytest.approx(14.0)
    assert "rolled-back 14.0s after its start" in result.detail
    assert result.evidence == ("1.0s: running at 25%", "14.0s: rolled-back at 0%")
    late = judged(drill, "back", samples((11, "running", 25), (35, "rolled-back", 0)))
    assert not late.passed and late.value == pytest.approx(25.0)
    never = judged(drill, "done", seen)
    assert not never.passed and "never completed: last seen rolled-back" in never.detail
    assert not judged(drill, "back", []).passed
    aborted = judged(drill, "back", samples((12, "aborted", 0)))
    assert aborted.passed  # an abort is a rollback too


class SlowAdmin:
    """An admin client whose every call takes a while and is remembered."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.calls: list[dict[str, object]] = []

    async def request(self, method: str, path: str, body: object = None, *,
                      log: bool = True, journal: list | None = None) -> object:
        await asyncio.sleep(0.01)
        self.sent.append((method, path))
        if journal is not None:
            journal.append({"method": method, "path": path})
        return {}


async def test_faults_that_end_together_are_each_undone_once(drill) -> None:
    admin = SlowAdmin()
    injector = Injector(admin)  # type: ignore[arg-type]
    gpus = Resolved(regions=("eu-west",), gpus=(("eu-west", "c"),))
    records = {}
    for f in drill.faults:
        record = FaultRecord(f.id, f.type.value, 0.0, 30.0)
        records[f.id] = record
        await injector.inject(plan_fault(f, gpus if f.target else Resolved(), 40.0), record)
    errors = await asyncio.gather(*(injector.restore(f.id) for f in drill.faults))
    assert errors == [[], [], []] and injector.ledger == []
    undone = admin.sent[3:]
    assert len(undone) == len(set(undone)) == 3
    assert await injector.restore() == [] and len(admin.sent) == 6  # nothing left to undo
    assert [c["method"] for c in records["canary"].calls] == ["POST", "DELETE"]
