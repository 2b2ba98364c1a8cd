# SPDX-License-Identifier: Apache-2.0
"""Judging checks over recorded requests: pure functions of the records and the faults.

A check's ``when`` picks the requests it reads and the moment it is judged:

- ``before``: requests issued before the first fault started; judged as it starts (a
  failure means the steady state does not hold: no fault is injected, the drill fails);
- ``during``: requests issued from the first fault's start to the last fault's end;
- ``after``: requests issued after the last fault ended (the recovery);
- ``continuous``: every request; judged on every tick for the display, and at the end for
  the verdict (residency: the first violation fails and stops the drill).

A check reads the requests of its ``cohorts`` and ``tenants`` (every one when not named).
A ratio or latency check with no request to judge fails: an unobserved hypothesis is not
a confirmed one.

Tenant checks: ``ttft`` and ``goodput`` may ``compare_to`` the same requests in another
window (``{when: before, max_ratio: 1.2}``: the other tenants' p99 TTFT during a flood at
most 1.2 times theirs before it; ``{when: before, min_ratio: 0.9}``: their completed
requests per second at least 0.9 times). ``throttled`` judges a tenant's attempts in the
window against its request quota (R per minute, from the running policy): at most
``R/60 * (W + burst)`` can be admitted in W seconds (GCRA, whose bucket holds ``burst``
seconds of the rate: a minute by default), so the answers above that are the excess, which
must be refused with 429 and Retry-After (``expect.min``: the share of the excess, default
0.9), while the tenant still gets ``min_admitted`` (0.8) of ``R/60 * W``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drills import accounting as acc
from drills.failover import failover_time
from drills.faults import rollout_id
from drills.model import Check, CheckType, Drill, When
from drills.records import FaultRecord, RequestRecord, StatusSample
from drills.throttling import throttling
from drills.violations import violations


@dataclass(frozen=True)
class CheckResult:
    name: str
    type: str
    when: str
    passed: bool
    value: float | None
    expected: str
    detail: str
    t: float
    evidence: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "when": self.when,
                "passed": self.passed, "value": self.value, "expected": self.expected,
                "detail": self.detail, "t": round(self.t, 3), "evidence": list(self.evidence),
                "data": dict(self.data)}


@dataclass(frozen=True)
class Windows:
    """The drill's before / during / after windows on the drill clock."""

    first_start: float
    last_end: float
    end: float

    def of(self, when: When) -> tuple[float, float]:
        return {When.BEFORE: (0.0, self.first_start),
                When.DURING: (self.first_start, self.last_end),
                When.AFTER: (self.last_end, self.end),
                When.CONTINUOUS: (0.0, float("inf"))}[when]


def windows_of(drill: Drill, faults: Sequence[FaultRecord]) -> Windows:
    """Windows from the faults as they happened (planned times for those not injected)."""
    starts, ends = [], []
    for f in drill.faults:
        record = next((r for r in faults if r.id == f.id), None)
        starts.append(record.t_start if record and record.t_start is not None else f.start)
        ends.append(record.t_end if record and record.t_end is not None else f.end)
    if not starts:
        return Windows(drill.duration, drill.duration, drill.duration)
    return Windows(min(starts), max(ends), drill.duration)


@dataclass(frozen=True)
class _Scope:
    check: Check
    chosen: Sequence[RequestRecord]     # the check's cohorts, issued in its window
    records: Sequence[RequestRecord]    # everything recorded so far
    faults: Sequence[FaultRecord]
    status: StatusSample | None
    cohorts: tuple[str, ...]
    start: float
    end: float


Verdict = tuple[bool, float | None, str, list[str], dict[str, Any]]


@dataclass
class Judge:
    """Everything a check needs beyond the records; evaluation itself keeps no state."""

    drill: Drill
    allowed: Mapping[str, frozenset[str] | None]     # cohort -> allowed regions
    region_of: Callable[[str], str | None]
    all_regions: tuple[str, ...]
    quotas: Mapping[str, float | None] = field(default_factory=dict)  # tenant -> req/min
    samples: Sequence[StatusSample] = ()  # every status sample so far (the runner's list)

    def evaluate(self, check: Check, records: Sequence[RequestRecord],
                 faults: Sequence[FaultRecord], now: float,
                 status: StatusSample | None = None) -> CheckResult:
        handler = getattr(self, f"_{check.type.value}")
        start, end = windows_of(self.drill, faults).of(check.when)
        cohorts = check.cohorts
        if check.type is CheckType.RESIDENCY and not cohorts:
            cohorts = tuple(c for c, a in self.allowed.items() if a is not None)
        chosen = [r for r in records if start <= r.t_issue < end and _picked(check, cohorts, r)]
        scope = _Scope(check, chosen, records, faults, status, cohorts, start, end)
        passed, value, detail, evidence, data = handler(scope)
        unit = {CheckType.TTFT: "s", CheckType.FAILOVER_TIME: "s",
                CheckType.GOODPUT: " rps"}.get(check.type, "")
        expected = self._expected(check, unit)
        return CheckResult(check.name, check.type.value, check.when.value, passed, value,
                           expected, detail, now, tuple(evidence), data)

    @staticmethod
    def _expected(check: Check, unit: str) -> str:
        if check.type is CheckType.RESIDENCY:
            return "0 violations"
        if check.type is CheckType.REGION_HEALTH:
            parts = []
            if check.params.get("healthy"):
                parts.append("healthy: " + ", ".join(check.params["healthy"]))
            if check.params.get("unhealthy"):
                parts.append("unhealthy: " + ", ".join(check.params["unhealthy"]))
            return "; ".join(parts)
        if check.type is CheckType.LOST and "max_ratio" in check.params:
            return f"lost ratio <= {check.params['max_ratio']:g}"
        if check.type is CheckType.THROTTLED:
            return (f"429 with Retry-After for >= {check.expect.min or 0:g} of the requests "
                    f"above the quota; >= {check.params.get('min_admitted', 0.8):g} of the "
                    "quota's rate admitted")
        cmp = check.params.get("compare_to")
        text = check.expect.describe(unit) if check.expect.min is not None or \
            check.expect.max is not None or not cmp else ""
        if cmp:
            other = cmp.get("cohort") or cmp.get("when")
            bound = f"<= {cmp['max_ratio']:g}x" if "max_ratio" in cmp \
                else f">= {cmp['min_ratio']:g}x"
            text = (f"{text} and " if text else "") + f"{bound} {other}"
        return text

    # -- one method per check type: (passed, value, detail, evidence, data) ----------------

    def _residency(self, s: _Scope) -> Verdict:
        found = violations(s.chosen, {c: self.allowed.get(c) for c in s.cohorts},
                           self.region_of)
        evidence = [v.describe() for v in found[:20]]
        detail = "no violation" if not found else \
            f"{len(found)} violation(s); first: {found[0].describe()}"
        return not found, float(len(found)), detail, evidence, {"violations": len(found)}

    def _lost(self, s: _Scope) -> Verdict:
        items = [acc.classify(r, s.faults) for r in s.chosen]
        t = acc.tally(items)
        lost = [c for c in items if c.outcome is acc.Outcome.LOST]
        excluded = 0
        if s.check.params.get("exclude_in_flight_at_fault"):
            excluded = sum(1 for c in lost if c.in_flight_at_fault)
            lost = [c for c in lost if not c.in_flight_at_fault]
        evidence = [_describe_lost(c) for c in lost[:20]]
        detail = f"{len(lost)} lost of {t.terminal} terminal requests"
        if excluded:
            detail += f" ({excluded} more were in flight where the fault hit, not counted)"
        if "max_ratio" in s.check.params:
            ratio = len(lost) / t.terminal if t.terminal else 0.0
            return ratio <= s.check.params["max_ratio"], ratio, detail, evidence, t.as_dict()
        return s.check.expect.holds(len(lost)), float(len(lost)), detail, evidence, t.as_dict()

    @staticmethod
    def _ratio(s: _Scope, attr: str, label: str) -> Verdict:
        t = acc.tally(acc.classify(r, s.faults) for r in s.chosen)
        value = getattr(t, attr)
        if value is None:
            return False, None, f"no terminal request to judge the {label} on", [], t.as_dict()
        detail = f"{label} {value:.4f} over {t.terminal} requests"
        return s.check.expect.holds(value), value, detail, [], t.as_dict()

    def _shed_ratio(self, s: _Scope) -> Verdict:
        return self._ratio(s, "shed_ratio", "shed ratio")

    def _error_ratio(self, s: _Scope) -> Verdict:
        return self._ratio(s, "lost_ratio", "lost ratio")

    def _completed(self, s: _Scope) -> Verdict:
        return self._ratio(s, "completed_ratio", "completed ratio")

    def _ttft(self, s: _Scope) -> Verdict:
        q = float(s.check.params.get("quantile", 0.99))
        values = acc.ttfts(acc.classify(r, s.faults) for r in s.chosen)
        value = acc.quantile(values, q)
        label = f"p{q * 100:g} TTFT"
        if value is None:
            return False, None, f"no completed request to measure {label} on", [], {}
        passed = s.check.expect.max is None or s.check.expect.holds(value)
        detail = f"{label} {value:.3f}s over {len(values)} completed requests"
        data: dict[str, Any] = {"quantile": q, "count": len(values)}
        cmp = s.check.params.get("compare_to")
        if cmp:
            label = cmp.get("cohort") or cmp["when"]
            others = self._compared(s, cmp)
            other = acc.quantile(acc.ttfts(acc.classify(r, s.faults) for r in others), q)
            if other is None or other <= 0:
                return False, value, detail + f"; no {label} TTFT to compare", [], data
            ratio = value / other
            data.update(ratio=ratio, compared=other)
            detail += f"; {ratio:.2f}x {label} ({other:.3f}s)"
            passed = passed and ratio <= cmp["max_ratio"]
        return passed, value, detail, [], data

    def _compared(self, s: _Scope, cmp: Mapping[str, Any]) -> list[RequestRecord]:
        """The requests a ``compare_to`` names: another cohort in the same window, or the
        check's own requests in another window."""
        if cmp.get("cohort"):
            return [r for r in s.records if r.cohort == cmp["cohort"]
                    and s.start <= r.t_issue < s.end
                    and (not s.check.tenants or r.tenant in s.check.tenants)]
        start, end = windows_of(self.drill, s.faults).of(When(cmp["when"]))
        return [r for r in s.records if start <= r.t_issue < end
                and _picked(s.check, s.cohorts, r)]

    def _span(self, start: float, end: float) -> float:
        return max(0.0, min(end, self.drill.duration) - start)

    def _goodput(self, s: _Scope) -> Verdict:
        """Completed requests per second: those issued in the window that completed, over
        the window's length."""
        span = self._span(s.start, s.end)
        t = acc.tally(acc.classify(r, s.faults) for r in s.chosen)
        if span <= 0 or not t.terminal:
            return False, None, "no terminal request to judge the goodput on", [], {}
        value = t.completed / span
        detail = f"{value:.2f} completed/s ({t.completed} of {t.terminal} in {span:.1f}s)"
        data: dict[str, Any] = {**t.as_dict(), "seconds": span}
        passed = s.check.expect.holds(value) if s.check.expect.min is not None or \
            s.check.expect.max is not None else True
        cmp = s.check.params.get("compare_to")
        if cmp:
            start, end = windows_of(self.drill, s.faults).of(When(cmp["when"]))
            other_span = self._span(start, end)
            done = acc.tally(acc.classify(r, s.faults) for r in self._compared(s, cmp))
            if other_span <= 0 or not done.completed:
                return False, value, detail + f"; nothing completed {cmp['when']} to " \
                    "compare", [], data
            other = done.completed / other_span
            ratio = value / other
            data.update(ratio=ratio, compared=other)
            detail += f"; {ratio:.2f}x {cmp['when']} ({other:.2f}/s)"
            passed = passed and ratio >= cmp["min_ratio"]
        return passed, value, detail, [], data

    def _throttled(self, s: _Scope) -> Verdict:
        """Per tenant named: its answers above its quota refused with 429 and Retry-After
        (the value: the smallest share refused), and what the quota owes it admitted."""
        if not s.check.tenants:
            return False, None, "no tenant named", [], {}
        span = self._span(s.start, s.end)
        ratios: list[float | None] = []
        passed = True
        evidence: list[str] = []
        data: dict[str, Any] = {}
        for tenant in s.check.tenants:
            rpm = self.quotas.get(tenant)
            if not rpm:
                evidence.append(f"{tenant}: no requests quota in the running policy")
                ratios.append(None)
                continue
            judged = throttling(s.records, tenant, s.cohorts, s.start, s.start + span, rpm,
                                float(s.check.params.get("min_admitted", 0.8)),
                                float(s.check.params.get("burst", 60.0)))
            data[tenant] = judged.as_dict()
            evidence.append(judged.describe(tenant))
            ratios.append(judged.ratio)
            passed = passed and judged.holds and s.check.expect.holds(judged.ratio)
        known = [r for r in ratios if r is not None]
        value = min(known) if len(known) == len(ratios) else None
        return passed and value is not None, value, "; ".join(evidence), evidence, data

    def _failover_time(self, s: _Scope) -> Verdict:
        params = s.check.params
        fid = params["fault"]
        record = next((f for f in s.faults if f.id == fid), None)
        if record is None or record.t_start is None:
            return False, None, f"fault {fid} was not injected", [], {}
        end = record.t_end if record.t_end is not None else self.drill.fault(fid).end
        hit = set(record.regions)
        worst: float | None = 0.0
        evidence = []
        data: dict[str, Any] = {}
        for name in s.cohorts or tuple(self.allowed):
            allowed = self.allowed.get(name)
            base = set(params.get("surviving") or ()) or \
                set(allowed if allowed is not None else self.all_regions)
            surviving = frozenset(base - hit)
            result = failover_time(s.records, [name], record.t_start, end, surviving,
                                   share=params["share"], window=params["window"],
                                   min_requests=params["min_requests"])
            data[name] = {"seconds": result.seconds, "surviving": sorted(surviving),
                          "window_requests": result.requests, "served": result.served}
            on = ", ".join(sorted(surviving))
            if result.seconds is None:
                worst = None
                evidence.append(f"{name}: never {params['share']:.0%} on {on} during the fault")
                continue
            evidence.append(f"{name}: {result.seconds:.2f}s ({result.served}/"
                            f"{result.requests} on {on})")
            if worst is not None:
                worst = max(worst, result.seconds)
        if worst is None:
            return False, None, "traffic did not move while the fault was on", evidence, data
        return s.check.expect.holds(worst), worst, f"failover in {worst:.2f}s", evidence, data

    def _traffic_share(self, s: _Scope) -> Verdict:
        """Share of answered requests (an HTTP response to the last attempt) that the named
        regions, or GPU servers (the ``x-director-backend`` header), answered."""
        backends = set(s.check.params.get("backends") or ())
        names = backends or set(s.check.params["regions"])
        finals = [r.final for r in s.chosen if r.final is not None and r.final.status is not None]
        where = [a.backend if backends else a.answered_region for a in finals]
        if not where:
            return False, None, "no answered request in the window", [], {}
        share = sum(1 for w in where if w in names) / len(where)
        detail = f"{share:.3f} of {len(where)} answered requests in {', '.join(sorted(names))}"
        return s.check.expect.holds(share), share, detail, [], {}

    def _rollout(self, s: _Scope) -> Verdict:
        """Seconds from a ``rollout.start`` fault's injection until the status page first
        showed its rollout in the expected status (rolled-back counts aborted too)."""
        fault_id, wanted = s.check.params["fault"], s.check.params["status"]
        fault = next((f for f in s.faults if f.id == fault_id), None)
        if fault is None or fault.t_start is None:
            return False, None, f"rollout {fault_id} was not started", [], {}
        ident = rollout_id(fault_id)
        seen = [(sample.t, sample.rollouts[ident]) for sample in self.samples
                if ident in sample.rollouts]
        evidence = [f"{t - fault.t_start:.1f}s: {r.get('status')} at {r.get('percent')}%"
                    for t, r in _changes(seen)]
        statuses = {wanted, "aborted"} if wanted == "rolled-back" else {wanted}
        reached = next(((t, r) for t, r in seen if r.get("status") in statuses), None)
        if reached is None:
            last = seen[-1][1] if seen else None
            detail = (f"never {wanted}: last seen {last.get('status')} at "
                      f"{last.get('percent')}%" if last else "never seen on the status page")
            return False, None, detail, evidence, {}
        seconds = reached[0] - fault.t_start
        detail = f"{wanted} {seconds:.1f}s after its start ({reached[1].get('reason') or '-'})"
        return s.check.expect.holds(seconds), seconds, detail, evidence, {"seconds": seconds}

    def _region_health(self, s: _Scope) -> Verdict:
        status = s.status
        if status is None or not status.reachable:
            return False, None, "the admin API status was not available", [], {}
        wrong = []
        for name in s.check.params.get("healthy") or ():
            state = status.regions.get(name)
            if state is None or state.get("healthy") is not True:
                wrong.append(f"{name} is not healthy ({_state(state)})")
        for name in s.check.params.get("unhealthy") or ():
            state = status.regions.get(name)
            if state is None or state.get("healthy") is not False:
                wrong.append(f"{name} is not unhealthy ({_state(state)})")
        return not wrong, float(len(wrong)), "; ".join(wrong) or "as expected", wrong, {}


def _picked(check: Check, cohorts: Sequence[str], record: RequestRecord) -> bool:
    """Whether a request is one of the check's cohorts and tenants."""
    return (not cohorts or record.cohort in cohorts) and \
        (not check.tenants or record.tenant in check.tenants)


def _describe_lost(c: acc.Classified) -> str:
    final = c.record.final
    text = f"{c.record.id} ({c.record.cohort}) t={c.record.t_issue:.2f}s: {c.reason}"
    if c.in_flight_at_fault:
        text += f" [in flight at {c.in_flight_at_fault}]"
    if final is not None and final.error:
        text += f": {final.error}"
    return text


def _state(state: Mapping[str, Any] | None) -> str:
    if state is None:
        return "unknown region"
    return ", ".join(f"{k}={state.get(k)}" for k in ("healthy", "draining", "stale")
                     if k in state)


def _changes(seen: list[tuple[float, dict[str, Any]]]) -> list[tuple[float, dict[str, Any]]]:
    """The samples where a rollout's status or step changed."""
    out: list[tuple[float, dict[str, Any]]] = []
    for t, r in seen:
        key = (r.get("status"), r.get("percent"))
        if not out or (out[-1][1].get("status"), out[-1][1].get("percent")) != key:
            out.append((t, r))
    return out
