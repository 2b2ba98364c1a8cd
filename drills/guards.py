# SPDX-License-Identifier: Apache-2.0
"""Guards: stop conditions evaluated every ``guards.evaluate_every`` while the drill runs.

A guard is one of:

- a metric over a sliding ``window`` of the most recent requests (``error_ratio``,
  ``shed_ratio``, ``completed``, ``lost``, ``ttft``, ``traffic_share``) with an ``expect``;
  it is judged only once ``min_requests`` requests in the window have ended;
- ``check: NAME``: a check of the drill, judged as it stands at that moment;
- ``kill_switch``: fires as soon as its ``file`` exists (an operator's big red button that
  needs neither the admin API nor Redis).

A guard fires after ``failure_threshold`` consecutive failed evaluations; the drill is then
aborted (restore runs, verdict ``aborted``, exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from drills import accounting as acc
from drills.checks import Judge
from drills.model import Check, CheckType, Guard, When
from drills.records import FaultRecord, RequestRecord, StatusSample


@dataclass
class GuardState:
    guard: Guard
    failures: int = 0
    fired: bool = False
    value: float | None = None
    detail: str = "not evaluated yet"
    history: list[tuple[float, bool]] = field(default_factory=list)


@dataclass(frozen=True)
class Fired:
    guard: str
    t: float
    detail: str


class Guards:
    def __init__(self, guards: Sequence[Guard], checks: Sequence[Check], judge: Judge) -> None:
        self.states = [GuardState(g) for g in guards]
        self.checks = {c.name: c for c in checks}
        self.judge = judge

    def evaluate(self, records: Sequence[RequestRecord], faults: Sequence[FaultRecord],
                 now: float, status: StatusSample | None = None) -> Fired | None:
        """Evaluate every guard once; the first that fires, or None."""
        for state in self.states:
            ok, value, detail = self._one(state.guard, records, faults, now, status)
            state.value, state.detail = value, detail
            state.history.append((round(now, 3), ok is not False))
            if ok is False:
                state.failures += 1
            elif ok is True:
                state.failures = 0
            if state.failures >= state.guard.failure_threshold and not state.fired:
                state.fired = True
                return Fired(state.guard.name, now, detail)
        return None

    def _one(self, guard: Guard, records: Sequence[RequestRecord],
             faults: Sequence[FaultRecord], now: float,
             status: StatusSample | None) -> tuple[bool | None, float | None, str]:
        if guard.type == "kill_switch":
            hit = guard.file is not None and os.path.exists(guard.file)
            return (not hit), None, f"kill switch {guard.file} " + \
                ("exists" if hit else "absent")
        if guard.type == "check":
            check = self.checks[guard.check or ""]
            result = self.judge.evaluate(check, records, faults, now, status)
            return result.passed, result.value, result.detail
        recent = [r for r in records if now - guard.window <= r.t_issue < now and r.finished]
        if guard.cohorts:
            recent = [r for r in recent if r.cohort in guard.cohorts]
        items = [acc.classify(r, faults) for r in recent]
        terminal = [c for c in items if c.outcome not in
                    (acc.Outcome.PENDING, acc.Outcome.CANCELLED, acc.Outcome.NOT_SENT)]
        needed = int(guard.params.get("min_requests", 5))
        if len(terminal) < needed:
            return None, None, f"{len(terminal)} requests ended in the last " \
                f"{guard.window:g}s (judged from {needed})"
        check = Check(guard.name, CheckType(guard.type), When.CONTINUOUS, guard.expect,
                      guard.cohorts, {"quantile": guard.params.get("quantile", 0.99)})
        if check.type is CheckType.LOST:
            check = replace(check, params={})
        result = self.judge.evaluate(check, recent, faults, now, status)
        return result.passed, result.value, f"last {guard.window:g}s: {result.detail}"
