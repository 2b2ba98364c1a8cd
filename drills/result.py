# SPDX-License-Identifier: Apache-2.0
"""A drill's verdict and the summary that every report leads with.

Verdicts and exit codes: ``passed`` 0 (every check held), ``failed`` 1 (a check deviated;
a residency violation also stops the drill at once), ``aborted`` 2 (a guard fired, or the
operator interrupted it), ``error`` 3 (the drill could not run as written: the admin API
refused or could not be reached, a fault could not be injected or restored, a target was
empty). An error is never reported as passed; restore runs in every case.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from drills import accounting as acc
from drills.checks import CheckResult
from drills.model import CheckType
from drills.records import FaultRecord, RequestRecord


class Verdict(enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    ABORTED = "aborted"
    ERROR = "error"

    @property
    def exit_code(self) -> int:
        return {"passed": 0, "failed": 1, "aborted": 2, "error": 3}[self.value]


@dataclass
class DrillResult:
    verdict: Verdict
    reason: str
    checks: list[CheckResult] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    summary: list[tuple[str, str]] = field(default_factory=list)


def summary_rows(verdict: Verdict, reason: str, duration: float,
                 records: Sequence[RequestRecord], faults: Sequence[FaultRecord],
                 checks: Sequence[CheckResult]) -> list[tuple[str, str]]:
    """The summary table: (what, value) rows, the same in every report and on the console."""
    items = [acc.classify(r, faults) for r in records]
    t = acc.tally(items)
    q = acc.quantile(acc.ttfts(items), 0.99)
    residency = [c for c in checks if c.type == CheckType.RESIDENCY.value]
    violations = int(sum(c.value or 0 for c in residency)) if residency else None
    failover = [c for c in checks if c.type == CheckType.FAILOVER_TIME.value]
    rows = [
        ("verdict", f"{verdict.value} (exit {verdict.exit_code})"),
        ("reason", reason),
        ("duration", f"{duration:.1f}s"),
        ("requests", f"{t.total} ({t.not_sent} not sent, {t.cancelled} cancelled)"),
        ("completed", f"{t.completed} ({t.ok} first try, {t.recovered} after a retry, "
                      f"{t.shed_recovered} shed and recovered)"),
        ("shed", f"{t.shed_once} shed at least once, {t.shed} gave up "
                 f"(ratio {_pct(t.shed_ratio)})"),
        ("refused (fail closed)", str(t.refused)),
        ("lost", f"{t.lost} ({t.lost_at_fault} in flight where a fault hit)"),
        ("residency violations", "not checked" if violations is None else str(violations)),
        ("p99 TTFT", f"{q:.3f}s" if q is not None else "n/a"),
    ]
    for c in failover:
        rows.append((f"failover time ({c.name})",
                     f"{c.value:.2f}s" if c.value is not None else "not reached"))
    for tenant in dict.fromkeys(r.tenant for r in records if r.tenant is not None):
        mine = [i for i in items if i.record.tenant == tenant]
        tt = acc.tally(mine)
        refused = sum(1 for i in mine for a in i.record.attempts if a.status == 429)
        p99 = acc.quantile(acc.ttfts(mine), 0.99)
        rows.append((f"tenant {tenant}", f"{tt.total} requests, {tt.completed} completed, "
                     f"{refused} answers 429, p99 TTFT "
                     f"{f'{p99:.3f}s' if p99 is not None else 'n/a'}"))
    for f in faults:
        state = "restored" if f.restored else ("error" if f.error else "not restored")
        when = f"{f.t_start:.1f}s-{f.t_end:.1f}s" if f.t_start is not None and \
            f.t_end is not None else "not injected" if f.t_start is None else \
            f"{f.t_start:.1f}s-"
        rows.append((f"fault {f.id}", f"{f.type} {', '.join(f.regions or f.processes)} "
                                      f"{when} {state}"))
    passed = sum(1 for c in checks if c.passed)
    rows.append(("checks", f"{passed}/{len(checks)} passed"))
    for c in checks:
        mark = "PASS" if c.passed else "FAIL"
        value = "" if c.value is None else f" = {_num(c.value)}"
        rows.append((f"  {mark} {c.name}", f"{c.type}{value} (expected {c.expected}): "
                                            f"{c.detail}"))
    return rows


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2%}"


def _num(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3f}"


def summary_text(rows: Sequence[tuple[str, str]]) -> str:
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def summary_markdown(rows: Sequence[tuple[str, str]]) -> str:
    lines = ["| what | value |", "| --- | --- |"]
    lines.extend(f"| {k.strip()} | {v.replace('|', '/')} |" for k, v in rows)
    return "\n".join(lines)


def as_json(rows: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"what": k.strip(), "value": v} for k, v in rows]
