# SPDX-License-Identifier: Apache-2.0
"""``director drill``: chaos failover drills against a running system.

``director drill check FILE`` validates a drill file (exit 0 valid, 1 not).
``director drill run FILE`` runs it against the admin API at ``--target`` and exits
0 passed, 1 failed, 2 aborted, 3 error; ``--dry-run`` validates, resolves the targets and
prints the timeline without injecting anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from director.console import plain_console

app = typer.Typer(help="Chaos failover drills: break regions on purpose, prove failover.",
                  no_args_is_help=True)
out = plain_console()
err = plain_console(stderr=True)

ERROR_EXIT = 3


def _variables(values: list[str] | None) -> dict[str, str]:
    result = {}
    for item in values or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--var")
        result[key.strip()] = value
    return result


def _load(file: Path, variables: dict[str, str]):
    from drills.errors import DrillFileError
    from drills.loader import load_drill

    try:
        return load_drill(file, variables)
    except DrillFileError as exc:
        err.print(exc.render(), markup=False)
        return None


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="Drill file (YAML).")],
    var: Annotated[list[str] | None, typer.Option("--var", help="NAME=VALUE overriding "
                                                  "the drill's vars (repeatable).")] = None,
) -> None:
    """Validate a drill file: schema, names, times, blast radius (no network)."""
    drill = _load(file, _variables(var))
    if drill is None:
        raise typer.Exit(1)
    out.print(f"{file}: ok: drill {drill.name}, {len(drill.faults)} fault(s), "
              f"{len(drill.checks)} check(s), {drill.duration:g}s of load", markup=False)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="Drill file (YAML).")],
    target: Annotated[str, typer.Option(help="URL of the admin API.")] =
    "http://127.0.0.1:8080",
    token: Annotated[str | None, typer.Option(help="Admin bearer token (default: "
                                              "$DIRECTOR_TOKEN, then "
                                              "/tmp/director-<uid>/admin.token).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate, resolve targets and "
                                          "print the timeline; inject nothing.")] = False,
    report_dir: Annotated[Path, typer.Option(help="Where the journal and reports go.")] =
    Path("drill-reports"),
    junit: Annotated[Path | None, typer.Option(help="Also write JUnit XML here.")] = None,
    var: Annotated[list[str] | None, typer.Option("--var", help="NAME=VALUE overriding "
                                                  "the drill's vars (repeatable).")] = None,
    live: Annotated[bool, typer.Option(help="Live progress display (on a terminal).")] = True,
) -> None:
    """Run a drill: load, faults, checks, guards; restore always; report."""
    drill = _load(file, _variables(var))
    if drill is None:
        raise typer.Exit(ERROR_EXIT)
    from drills.admin import find_token

    secret = find_token(token)
    if dry_run:
        raise typer.Exit(asyncio.run(_dry_run(drill, target, secret)))
    code = asyncio.run(_run(drill, target, secret, report_dir, junit, live))
    raise typer.Exit(code)


async def _dry_run(drill: Any, target: str, token: str | None) -> int:
    from drills.admin import AdminClient
    from drills.arrivals import build_schedule
    from drills.errors import AdminApiError, DrillError
    from drills.prepare import prepare
    from drills.timeline import render

    async with AdminClient(target, token) as admin:
        try:
            prepared = await prepare(drill, admin)
        except AdminApiError as exc:
            if exc.status is None:
                out.print(render(drill, build_schedule(drill.load, drill.faults).baseline_rps),
                          markup=False)
                out.print(f"\ntargets not resolved: {exc}", markup=False)
                out.print("dry run: nothing injected", markup=False)
                return 0
            err.print(f"error: {exc}", markup=False)
            return ERROR_EXIT
        except DrillError as exc:
            err.print(f"error: {exc}", markup=False)
            return ERROR_EXIT
    out.print(render(drill, prepared.schedule.baseline_rps), markup=False)
    out.print(f"\nagainst {target}: service {prepared.topology.service}, DNS "
              f"{prepared.topology.dns[0]}:{prepared.topology.dns[1]}", markup=False)
    for fid, plan in prepared.plans.items():
        what = ", ".join([*plan.resolved.regions, *(f"{r}/{g}" for r, g in plan.resolved.gpus
                                                    if plan.fault.type.target_kind == "gpu")])
        calls = "; ".join(f"{o.inject.method} {o.inject.path} {json.dumps(o.inject.body)}"
                          for o in plan.operations)
        out.print(f"  fault {fid}: {what or ', '.join(plan.processes) or '-'}: {calls}",
                  markup=False)
    for name, c in prepared.cohorts.items():
        allowed = prepared.allowed[name]
        out.print(f"  cohort {name}: {', '.join(str(s.network) for s in c.subnets)}"
                  f"{'; allowed: ' + ', '.join(sorted(allowed)) if allowed else ''}",
                  markup=False)
    out.print(f"  {len(prepared.schedule.arrivals)} requests scheduled"
              + (f" ({prepared.schedule.truncated} over max_requests dropped)"
                 if prepared.schedule.truncated else ""), markup=False)
    out.print("dry run: nothing injected", markup=False)
    return 0


async def _run(drill: Any, target: str, token: str | None, report_dir: Path,
               junit: Path | None, live: bool) -> int:
    from drills.admin import AdminClient
    from drills.errors import DrillError
    from drills.prepare import prepare
    from drills.progress import LiveDisplay
    from drills.reports import write_reports
    from drills.result import summary_rows, summary_text
    from drills.runner import Runner

    async with AdminClient(target, token) as admin:
        try:
            prepared = await prepare(drill, admin)
        except DrillError as exc:
            err.print(f"error: {exc}", markup=False)
            _error_journal(drill, target, str(exc), report_dir, junit)
            return ERROR_EXIT
        display = LiveDisplay(err if live else plain_console(stderr=True, quiet=True))
        with display:
            result = await Runner(prepared, admin, display).execute()
    files = write_reports(result, target, report_dir, junit)
    rows = summary_rows(result.verdict, result.reason, result.duration, result.records,
                        result.faults, result.checks)
    out.print(summary_text(rows), markup=False)
    for kind, path in files.items():
        out.print(f"{kind}: {path}", markup=False)
    return result.verdict.exit_code


def _error_journal(drill: Any, target: str, reason: str, report_dir: Path,
                   junit: Path | None) -> None:
    """A journal for a drill that could not start (nothing was injected)."""
    from drills.journal import JOURNAL_FORMAT, write_journal
    from drills.junit import write_junit

    now = time.time()
    data = {
        "format": JOURNAL_FORMAT,
        "drill": {"name": drill.name, "title": drill.title, "hypothesis": drill.hypothesis,
                  "file": drill.path, "tags": list(drill.tags), "duration": drill.duration},
        "verdict": "error", "exit_code": ERROR_EXIT, "reason": reason,
        "started_at": datetime.fromtimestamp(now, UTC).isoformat(), "duration": 0.0,
        "target": target, "summary": [{"what": "verdict", "value": "error (exit 3)"},
                                      {"what": "reason", "value": reason}],
        "checks": [], "faults": [], "errors": [reason], "warnings": [], "requests": [],
    }
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    path = write_journal(data, report_dir / f"{drill.name}-{stamp}.json")
    out.print(f"json: {path}", markup=False)
    if junit is not None or "junit" in drill.report.formats:
        write_junit(data, junit or path.with_suffix(".junit.xml"))
