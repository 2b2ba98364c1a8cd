# SPDX-License-Identifier: Apache-2.0
"""Run a prepared drill: load, faults on schedule, checks, guards, and a restore that always
runs.

Three tasks share the drill clock (t0 = the load's start): the load generator, the fault
schedule (which judges the ``before`` checks as the first fault is due, then injects each
fault and restores it at its end) and the monitor (every ``guards.evaluate_every``: polls
``/api/v1/status``, evaluates the guards, refreshes the display). A residency violation is
caught as the evidence arrives (the client reports each DNS answer and response).

A drill that sends as tenants first makes one API key per tenant through the admin API
(``tenant_keys``; a refusal is an ``error`` with nothing sent or injected), waits
``KEYS_SETTLE_S`` for the balancers to follow them, and revokes them after the restore.

However the run ends (the load finished, a guard fired, a violation, an injection error,
Ctrl-C or SIGTERM, an unexpected exception), ``execute`` restores every fault still in the
ledger, then runs the drill's restore steps and waits for the regions to be healthy again.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from drills.admin import AdminClient
from drills.checks import CheckResult, Judge, windows_of
from drills.errors import AdminApiError, DrillError
from drills.faults import Call, Injector, Resolved, restore_step_calls
from drills.guards import Guards
from drills.loadgen import LoadGenerator
from drills.model import CheckType, Drill, Fault, FaultType, RestoreStep, When
from drills.prepare import Prepared
from drills.records import (
    Attempt,
    FaultRecord,
    RequestRecord,
    StatusSample,
)
from drills.result import Verdict
from drills.tenant_keys import TenantKeys
from drills.violations import Violation, attempt_violations

STATUS_TIMEOUT_S = 2.0
STATUS_LEAD_S = 1.0  # how long before the last restore `during` health is read
KEYS_SETTLE_S = 1.0  # balancers follow a new key on its change notification


class Display(Protocol):
    def refresh(self, run: Runner) -> None: ...


@dataclass
class Event:
    t: float
    kind: str
    text: str


@dataclass
class Run:
    """What one execution recorded; the reports render it."""

    drill: Drill
    prepared: Prepared
    started_at: float                      # wall clock (epoch seconds) at t0
    verdict: Verdict = Verdict.ERROR
    reason: str = ""
    duration: float = 0.0
    records: list[RequestRecord] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    samples: list[StatusSample] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    guards: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tenant_keys: list[dict[str, Any]] = field(default_factory=list)  # {tenant, id, revoked}


class Runner:
    def __init__(self, prepared: Prepared, admin: AdminClient,
                 display: Display | None = None) -> None:
        self.prepared = prepared
        self.drill = prepared.drill
        self.admin = admin
        self.display = display
        self.t0 = time.monotonic()
        self.clock: Callable[[], float] = lambda: time.monotonic() - self.t0
        self.run = Run(self.drill, prepared, time.time())
        self.judge = Judge(self.drill, prepared.allowed, prepared.topology.region_of,
                           prepared.topology.names, prepared.quotas, self.run.samples)
        self.keys = TenantKeys(admin, f"drill {self.drill.name}")
        self.guards = Guards(self.drill.guards, self.drill.checks, self.judge)
        self.injector = Injector(admin)
        self.loadgen: LoadGenerator | None = None
        self.judged: dict[str, CheckResult] = {}
        self.live: dict[str, CheckResult] = {}
        self._stop = asyncio.Event()
        self._abort: tuple[Verdict, str] | None = None
        self._timers: set[asyncio.Task[None]] = set()
        self.fault_records = {f.id: FaultRecord(f.id, f.type.value, f.start, f.end,
                                                ttl=self.drill.fault_ttl(f))
                              for f in self.drill.injected_faults}
        self.run.faults = list(self.fault_records.values())

    # -- control ---------------------------------------------------------------------------

    def event(self, kind: str, text: str) -> None:
        self.run.events.append(Event(round(self.clock(), 3), kind, text))

    def abort(self, verdict: Verdict, reason: str) -> None:
        """Stop the drill (the first reason wins); restore follows."""
        if self._abort is None:
            self._abort = (verdict, reason)
            self.event("abort", f"{verdict.value}: {reason}")
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def records(self) -> list[RequestRecord]:
        return self.loadgen.records if self.loadgen is not None else []

    def _observe(self, kind: str, record: RequestRecord, attempt: Attempt) -> None:
        allowed = self.prepared.allowed.get(record.cohort)
        if allowed is None or kind not in ("dns", "response"):
            return
        found = attempt_violations(record, attempt, allowed, self.prepared.topology.region_of)
        known = {(v.request, v.attempt, v.evidence) for v in self.run.violations}
        fresh = [v for v in found if (v.request, v.attempt, v.evidence) not in known]
        if fresh:
            self.run.violations.extend(fresh)
            self.abort(Verdict.FAILED, f"residency violation: {fresh[0].describe()}")

    # -- the run ---------------------------------------------------------------------------

    async def execute(self) -> Run:
        loop = asyncio.get_running_loop()
        handled = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.abort, Verdict.ABORTED,
                                        f"interrupted by {sig.name}")
                handled.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if not await self._make_keys():
            await self._revoke_keys()
            return self._ended_before_load()
        self.t0 = time.monotonic()
        self.run.started_at = time.time()
        self.admin.clock = self.clock
        p = self.prepared
        self.loadgen = LoadGenerator(p.schedule, p.cohorts, p.topology, self.drill.load,
                                     self.clock, self._observe, self.keys.keys)
        self.event("load", f"load starts: {len(p.schedule.arrivals)} requests scheduled")
        load_task = asyncio.create_task(self.loadgen.run(self.drill.report.drain))
        fault_task = asyncio.create_task(self._faults())
        monitor_task = asyncio.create_task(self._monitor())
        stop_task = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({load_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
            if self.stopping:
                self.loadgen.stop()
                await self.loadgen.cancel()
            await load_task
            self.event("load", "load finished")
        except BaseException as exc:  # restore must follow whatever happened
            if not isinstance(exc, asyncio.CancelledError):
                self.run.errors.append(f"unexpected {type(exc).__name__}: {exc}")
            self.abort(Verdict.ERROR if not isinstance(exc, asyncio.CancelledError)
                       else Verdict.ABORTED, f"{type(exc).__name__}: {exc}")
        finally:
            self.loadgen.stop()
            for task in (fault_task, monitor_task, stop_task, load_task, *self._timers):
                task.cancel()
            await asyncio.gather(fault_task, monitor_task, stop_task, load_task,
                                 *self._timers, return_exceptions=True)
            await asyncio.shield(self._restore_all())
            await asyncio.shield(self._revoke_keys())
            for sig in handled:
                loop.remove_signal_handler(sig)
        self.run.duration = self.clock()
        self.run.records = list(self.records)
        self._final_checks()
        self._verdict()
        if self.display is not None:
            self.display.refresh(self)
        return self.run

    # -- tenants' keys ----------------------------------------------------------------------

    async def _make_keys(self) -> bool:
        tenants = self.drill.tenant_names
        if not tenants:
            return True
        self.run.tenant_keys = self.keys.made
        try:
            await self.keys.make(tenants)
        except AdminApiError as exc:
            self.run.errors.append(f"cannot make the tenants' API keys: {exc}")
            self.abort(Verdict.ERROR, f"cannot make the tenants' API keys: {exc}")
            return False
        self.event("tenants", "API keys made for " + ", ".join(
            f"{k['tenant']} ({k['id']})" for k in self.keys.made))
        await asyncio.sleep(KEYS_SETTLE_S)
        return True

    async def _revoke_keys(self) -> None:
        if not self.keys.made:
            return
        errors = await self.keys.revoke()
        self.run.errors.extend(errors)
        self.event("tenants", f"API keys revoked: {sum(k['revoked'] for k in self.keys.made)}"
                   f" of {len(self.keys.made)}")

    def _ended_before_load(self) -> Run:
        self.run.duration = 0.0
        self._final_checks()
        self._verdict()
        return self.run

    # -- faults ----------------------------------------------------------------------------

    async def _sleep_until(self, t: float) -> bool:
        """Sleep until drill time ``t``; False if the drill is stopping."""
        delay = t - self.clock()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
        return not self.stopping

    async def _faults(self) -> None:
        faults = sorted(self.drill.injected_faults, key=lambda f: f.start)
        first = min((f.start for f in self.drill.faults), default=self.drill.duration)
        if not await self._sleep_until(first):
            return
        if not await self._judge_before():
            return
        last_end = max((f.end for f in self.drill.faults), default=self.drill.duration)
        status_during = asyncio.create_task(self._judge_status_during(last_end))
        self._timers.add(status_during)
        status_during.add_done_callback(self._timers.discard)
        for shape in (f for f in self.drill.faults if f.type.load_shape):
            timer = asyncio.create_task(self._load_shape_events(shape))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)
        for fault in faults:
            if not await self._sleep_until(fault.start):
                return
            record = self.fault_records[fault.id]
            plan = self.prepared.plans[fault.id]
            if plan.resolved.skipped:
                self.event("fault", f"{fault.id}: target empty, skipped")
                continue
            self.event("fault", f"inject {fault.id} ({fault.type.value}) on "
                       f"{', '.join(record.regions or plan.resolved.regions or plan.processes)}")
            # the fault is on from the moment it is sent (and may be, if the call is cut)
            record.t_start = self.clock()
            try:
                await self.injector.inject(plan, record)
                record.t_applied = self.clock()
            except DrillError as exc:
                if not any(r is record for r, _ in self.injector.ledger):
                    record.t_start = None  # refused: nothing of it was injected
                self.run.errors.append(str(exc))
                self.abort(Verdict.ERROR, f"fault could not be injected: {exc}")
                return
            timer = asyncio.create_task(self._end_fault(fault.id, fault.end))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)

    async def _load_shape_events(self, fault: Fault) -> None:
        """Journal events for a fault the load generator plays (a spike, a flood)."""
        what = f"{fault.id} ({fault.type.value})"
        rate = self.prepared.flood_rates.get(fault.id)
        if fault.type is FaultType.TENANT_FLOOD and rate is not None:
            what += f": {fault.params['tenant']} at {rate:g} rps"
        if not await self._sleep_until(fault.start):
            return
        self.event("load", f"{what} starts")
        if await self._sleep_until(fault.end):
            self.event("load", f"{fault.id} ends")

    async def _end_fault(self, fault_id: str, end: float) -> None:
        if not await self._sleep_until(end):
            return
        if self.drill.restore.strategy == "never":
            return
        await self._restore_fault(fault_id)

    async def _restore_fault(self, fault_id: str | None) -> None:
        pending = {r.id for r, _ in self.injector.ledger}
        errors = await self.injector.restore(fault_id)
        for fid in pending if fault_id is None else {fault_id} & pending:
            record = self.fault_records[fid]
            record.t_end = self.clock()
            record.restored = record.restore_error is None
            self.event("restore", f"restore {fid}" + (" failed" if record.restore_error
                                                      else ""))
        self.run.errors.extend(errors)

    async def _restore_all(self) -> None:
        if self.drill.restore.strategy != "never":
            await self._restore_fault(None)
            for step in self.drill.restore.steps:
                await self._restore_step(step)
        injected = any(r.t_start is not None for r in self.run.faults)
        if injected and self.drill.restore.wait_healthy > 0:
            await self._wait_healthy(self.drill.restore.wait_healthy)

    async def _restore_step(self, step: RestoreStep) -> None:
        resolved = self.prepared.restore_targets.get(step.target or "", Resolved())
        if resolved.skipped:
            return
        for call in restore_step_calls(step, resolved):
            await self._call(call, f"restore step {step.type}")

    async def _call(self, call: Call, what: str) -> None:
        try:
            await self.admin.request(call.method, call.path, call.body)
            self.event("restore", f"{what}: {call.path}")
        except AdminApiError as exc:
            self.run.errors.append(f"{what} failed: {exc}")

    async def _wait_healthy(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        last = ""
        while time.monotonic() < deadline:
            sample = await self._sample()
            bad = [n for n, s in sample.regions.items()
                   if s.get("healthy") is not True or s.get("draining")]
            if sample.reachable and not bad:
                self.event("restore", "every region is healthy again")
                return
            last = sample.error or ", ".join(bad)
            await asyncio.sleep(1.0)
        self.run.warnings.append(f"not every region was healthy {limit:g}s after the "
                                 f"restore ({last})")
        self.event("restore", f"regions still unhealthy after {limit:g}s: {last}")

    # -- checks, guards, status -------------------------------------------------------------

    async def _sample(self) -> StatusSample:
        t = self.clock()
        try:
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                status = await self.admin.status()
        except (AdminApiError, TimeoutError) as exc:
            return StatusSample(round(t, 3), False, error=str(exc) or "timeout")
        regions = {}
        for r in status.get("regions") or ():
            regions[r.get("name")] = {k: r.get(k) for k in
                                      ("healthy", "draining", "degraded", "stale",
                                       "utilization", "share")}
        rollouts = {str(r.get("id")): {k: r.get(k) for k in ("status", "percent", "reason")}
                    for r in status.get("rollouts") or () if isinstance(r, dict)}
        return StatusSample(round(t, 3), True, regions, rollouts=rollouts)

    async def _judge_before(self) -> bool:
        before = [c for c in self.drill.checks if c.when is When.BEFORE]
        if not before:
            return True
        sample = await self._sample()
        self.run.samples.append(sample)
        failed = []
        for check in before:
            result = self.judge.evaluate(check, self.records, self.run.faults, self.clock(),
                                         sample)
            self.judged[check.name] = result
            self.event("check", f"{check.name}: {'pass' if result.passed else 'FAIL'} "
                       f"({result.detail})")
            if not result.passed:
                failed.append(f"{check.name}: {result.detail}")
        if failed:
            self.abort(Verdict.FAILED, "the steady state does not hold before the first "
                       "fault, nothing was injected: " + "; ".join(failed))
            return False
        return True

    async def _judge_status_during(self, last_end: float) -> None:
        """Region-health checks of the ``during`` window look at the system just before
        the last fault is restored."""
        checks = [c for c in self.drill.checks
                  if c.when is When.DURING and c.type is CheckType.REGION_HEALTH]
        if not checks or not await self._sleep_until(last_end - STATUS_LEAD_S):
            return
        sample = await self._sample()
        self.run.samples.append(sample)
        for check in checks:
            result = self.judge.evaluate(check, self.records, self.run.faults, self.clock(),
                                         sample)
            self.judged[check.name] = result
            self.event("check", f"{check.name}: {'pass' if result.passed else 'FAIL'} "
                       f"({result.detail})")

    async def _monitor(self) -> None:
        while not self.stopping:
            sample = await self._sample()
            self.run.samples.append(sample)
            now = self.clock()
            fired = self.guards.evaluate(self.records, self.run.faults, now, sample)
            if fired is not None:
                self.event("guard", f"guard {fired.guard} fired: {fired.detail}")
                self.abort(Verdict.ABORTED, f"guard {fired.guard} fired: {fired.detail}")
            for check in self.drill.checks:
                if check.when is When.CONTINUOUS:
                    self.live[check.name] = self.judge.evaluate(check, self.records,
                                                                self.run.faults, now, sample)
            if self.display is not None:
                self.display.refresh(self)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.drill.guard_every)

    def _final_checks(self) -> None:
        windows = windows_of(self.drill, self.run.faults)
        last = self.run.samples[-1] if self.run.samples else None
        for check in self.drill.checks:
            if check.name in self.judged:
                self.run.checks.append(self.judged[check.name])
                continue
            end = windows.of(check.when)[1]
            if self._abort is not None and check.when is not When.CONTINUOUS \
                    and self.run.duration < end and check.name not in self.judged:
                self.run.checks.append(CheckResult(
                    check.name, check.type.value, check.when.value, False, None,
                    self.judge._expected(check, ""), "not judged: the drill stopped before "
                    "its window ended", self.run.duration))
                continue
            self.run.checks.append(self.judge.evaluate(check, self.run.records,
                                                       self.run.faults, self.run.duration,
                                                       last))
        self.run.guards = [{"name": s.guard.name, "fired": s.fired, "detail": s.detail,
                            "value": s.value, "history": s.history[-600:]}
                           for s in self.guards.states]

    def _verdict(self) -> None:
        run = self.run
        failed = [c for c in run.checks if not c.passed]
        if run.errors:
            run.verdict, run.reason = Verdict.ERROR, run.errors[0]
        elif self._abort is not None:
            run.verdict, run.reason = self._abort
        elif failed:
            run.verdict = Verdict.FAILED
            run.reason = "check(s) deviated: " + ", ".join(c.name for c in failed)
        else:
            run.verdict, run.reason = Verdict.PASSED, "every check held"
