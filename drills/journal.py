# SPDX-License-Identifier: Apache-2.0
"""The JSON journal: everything a run recorded, always written, the source of every report."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from drills import accounting as acc
from drills.records import to_json
from drills.result import as_json, summary_rows
from drills.runner import Run
from drills.timeline import timeline

JOURNAL_FORMAT = "director-drill-journal/v1"


def tallies(run: Run) -> dict[str, Any]:
    items = [acc.classify(r, run.faults) for r in run.records]
    by_cohort = {c.name: acc.tally(i for i in items if i.record.cohort == c.name).as_dict()
                 for c in run.drill.load.cohorts}
    by_tenant = {name: acc.tally(i for i in items if i.record.tenant == name).as_dict()
                 for name in run.drill.tenant_names}
    return {"all": acc.tally(items).as_dict(), "by_cohort": by_cohort, "by_tenant": by_tenant}


def journal(run: Run, target: str) -> dict[str, Any]:
    drill, prepared = run.drill, run.prepared
    rows = summary_rows(run.verdict, run.reason, run.duration, run.records, run.faults,
                        run.checks)
    classified = {r.id: acc.classify(r, run.faults) for r in run.records}
    requests = []
    for r in run.records:
        data = to_json(r)
        c = classified[r.id]
        data["outcome"] = c.outcome.value
        data["reason"] = c.reason
        data["in_flight_at_fault"] = c.in_flight_at_fault
        requests.append(data)
    return {
        "format": JOURNAL_FORMAT,
        "drill": {"name": drill.name, "title": drill.title, "hypothesis": drill.hypothesis,
                  "file": drill.path, "tags": list(drill.tags), "duration": drill.duration},
        "verdict": run.verdict.value,
        "exit_code": run.verdict.exit_code,
        "reason": run.reason,
        "started_at": datetime.fromtimestamp(run.started_at, UTC).isoformat(),
        "duration": round(run.duration, 3),
        "target": target,
        "summary": as_json(rows),
        "topology": {"service": prepared.topology.service,
                     "dns": list(prepared.topology.dns),
                     "regions": to_json(list(prepared.topology.regions))},
        "cohorts": {name: {"subnets": [str(s.network) for s in c.subnets],
                           "countries": list(c.cohort.countries), "share": c.cohort.share,
                           "allowed": _sorted_or_none(prepared.allowed[name])}
                    for name, c in prepared.cohorts.items()},
        "tenants": {name: {"share": next((t.share for t in drill.load.tenants
                                          if t.name == name), 0.0),
                           "quota": to_json(prepared.tenants.get(name)),
                           "keys": [k["id"] for k in run.tenant_keys if k["tenant"] == name]}
                    for name in drill.tenant_names},
        "floods": prepared.flood_rates,
        "timeline": to_json(timeline(drill, prepared.schedule.baseline_rps)),
        "tally": tallies(run),
        "checks": [c.as_dict() for c in run.checks],
        "guards": run.guards,
        "faults": to_json(run.faults),
        "events": to_json(run.events),
        "violations": to_json(run.violations),
        "errors": run.errors,
        "warnings": run.warnings,
        "samples": to_json(run.samples),
        "schedule": {"requests": len(prepared.schedule.arrivals),
                     "truncated": prepared.schedule.truncated,
                     "baseline_rps": prepared.schedule.baseline_rps},
        "requests": requests,
    }


def write_journal(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def _sorted_or_none(names: frozenset[str] | None) -> list[str] | None:
    return sorted(names) if names is not None else None
