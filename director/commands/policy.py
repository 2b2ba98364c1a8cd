"""``director policy check|fmt|explain|push``: the policy tooling operators run by hand and in
CI."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from director.console import plain_console
from director.engine import Engine, RegionState, Snapshot
from director.engine.clients import ClientInputError, client_from_input
from director.engine.types import Decision
from director.geo import GeoDatabaseError, GeoLocator
from director.policy_gate import accept
from policies.errors import PolicyError
from policies.formatter import format_text

app = typer.Typer(help="Check, format and explain policy files.", no_args_is_help=True)
out = plain_console()
err = plain_console(stderr=True)


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Policy files to check.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON report.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors (for "
                                         "CI pipelines).")] = False,
) -> None:
    """Parse, validate, prove residency (from the policy and by running the engine) and lint
    each FILE; exit 1 if any has an error (or, with --strict, a warning)."""
    reports = []
    failed = False
    for path in files:
        acceptance = accept(str(path), strict=strict)
        result, engine = acceptance.result, acceptance.engine
        ok = acceptance.ok
        failed |= not ok
        if as_json:
            reports.append({
                "file": str(path), "ok": ok,
                "errors": [d.as_dict() for d in acceptance.diagnostics],
                "warnings": [d.as_dict() for d in acceptance.warnings],
                "residency": [c.as_dict() for c in result.proof],
                "engine_decisions": engine.decisions if engine else 0,
                "engine_violations": [v.describe() for v in engine.violations] if engine
                else [],
                "engine": engine.as_dict() if engine else None,
            })
            continue
        if acceptance.warnings and not strict:
            err.print(PolicyError(acceptance.warnings, result.sources).render(), markup=False)
        if ok:
            policy = result.policy
            assert policy is not None  # accepted
            rules = sum(len(s.residency) for s in policy.services)
            proved = (f"residency proved on {len(result.proof)} paths of "
                      f"{_count(range(rules), 'rule')} and confirmed on {engine.summary()}"
                      if rules and engine else "no residency rules")
            warned = f", {_count(acceptance.warnings, 'warning')}" if acceptance.warnings \
                else ""
            out.print(f"{path}: ok ({_count(policy.regions, 'region')}, "
                      f"{_count(policy.services, 'service')}, {proved}{warned})")
        else:
            err.print(acceptance.error().render(), markup=False)
            err.print(f"{path}: {_count(acceptance.diagnostics, 'error')}", markup=False)
    if as_json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=2))
    raise typer.Exit(1 if failed else 0)


@app.command()
def fmt(
    file: Annotated[Path, typer.Argument(help="Policy file to format in place.")],
    check_only: Annotated[bool, typer.Option("--check", help="Only report whether FILE is "
                                             "formatted; exit 1 if not.")] = False,
) -> None:
    """Rewrite FILE in canonical form (or, with --check, report whether it is)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"{file}: cannot read: {exc}", markup=False)
        raise typer.Exit(1) from None
    try:
        formatted = format_text(text, str(file))
    except PolicyError as exc:
        err.print(exc.render(), markup=False)
        raise typer.Exit(1) from None
    if check_only:
        if formatted != text:
            err.print(f"{file}: not formatted (run: director policy fmt {file})", markup=False)
            raise typer.Exit(1)
        out.print(f"{file}: formatted")
        return
    if formatted != text:
        file.write_text(formatted, encoding="utf-8")
        out.print(f"{file}: reformatted")
    else:
        out.print(f"{file}: already formatted")


@app.command()
def explain(
    file: Annotated[Path, typer.Argument(help="Policy file.")],
    name: Annotated[str, typer.Option("--name", help="Service host name to resolve.")],
    client: Annotated[str | None, typer.Option("--client", help="Client (or resolver) "
                                               "address.")] = None,
    ecs: Annotated[str | None, typer.Option("--ecs", help="EDNS Client Subnet, e.g. "
                                            "81.2.69.0/24; /0 opts out.")] = None,
    down: Annotated[list[str] | None, typer.Option("--down", help="Region to treat as down "
                                                   "(repeatable).")] = None,
    load: Annotated[list[str] | None, typer.Option("--load", help="REGION=PCT live load of "
                                                   "capacity, e.g. eu-west=120 "
                                                   "(repeatable).")] = None,
    geoip: Annotated[Path | None, typer.Option("--geoip", help="MaxMind database (default: "
                                               "GeoLite2 City 2018).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Print the decision chain for one client and name, step by step."""
    acceptance = accept(str(file))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    policy = acceptance.policy
    try:
        locator = GeoLocator(str(geoip) if geoip else None)
    except GeoDatabaseError as exc:
        _fail(str(exc))
    try:
        who = client_from_input(locator, client, ecs, client_option="--client ",
                                ecs_option="--ecs ")
    except ClientInputError as exc:
        _fail(str(exc))
    snapshot = _snapshot(policy.region_names, down or [], load or [])
    try:
        service = policy.service(name)
    except KeyError:
        names = ", ".join(s.name for s in policy.services)
        _fail(f"no service '{name}' in {file} (services: {names})")
    decision = Engine(policy).decide(service, who, snapshot)
    if as_json:
        print(json.dumps(decision.as_dict(), indent=2))
        return
    _print_decision(decision, policy, ecs or client or "")


@app.command()
def push(
    file: Annotated[Path, typer.Argument(help="Policy file (its includes go with it).")],
    api: Annotated[str, typer.Option("--api", help="Admin API base URL, e.g. "
                                     "http://127.0.0.1:8080.")],
    token: Annotated[str, typer.Option("--token", envvar="DIRECTOR_API_TOKEN",
                                       help="Admin token (or DIRECTOR_API_TOKEN).")],
    if_match: Annotated[str | None, typer.Option(
        "--if-match", help="Replace only this version: an ETag or version number (default: "
        "the ETag in FILE.etag, written by the last push of FILE).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace whatever version is "
                                        "stored (no If-Match).")] = False,
) -> None:
    """Check FILE, then make it the active policy (PUT /api/v1/policy). Sends If-Match when
    it knows the version FILE was edited from, so a change stored meanwhile by someone else
    is not overwritten (exit 1, nothing changed): pull it in, then push again."""
    from director.commands.policy_push import PushError, push_policy

    acceptance = accept(str(file))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    if force and if_match:
        _fail("--force and --if-match contradict each other")
    try:
        pushed = push_policy(api, token, file, acceptance.sources(), if_match=if_match,
                             force=force)
    except PushError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    out.print(f"{file}: active as version {pushed.version} (ETag {pushed.etag}"
              f"{', replacing ' + pushed.sent if pushed.sent else ''})", markup=False)
    for warning in pushed.warnings:
        err.print(warning, markup=False)


def _snapshot(regions: tuple[str, ...], down: list[str], load: list[str]) -> Snapshot:
    states = {name: RegionState() for name in regions}
    for name in down:
        if name not in states:
            _fail(f"--down: unknown region '{name}' (regions: {', '.join(regions)})")
        states[name] = dataclasses.replace(states[name], healthy=False)
    for item in load:
        region, _, pct = item.partition("=")
        if region not in states:
            _fail(f"--load: unknown region '{region}' (regions: {', '.join(regions)})")
        try:
            utilization = float(pct.rstrip("%")) / 100.0
        except ValueError:
            _fail(f"--load: expected REGION=PCT, e.g. eu-west=120, got '{item}'")
        states[region] = dataclasses.replace(states[region], utilization=utilization)
    return Snapshot(1, states)


def _print_decision(decision: Decision, policy, asked: str) -> None:
    out.print(f"[bold]{decision.service}[/bold] for {asked}")
    for number, step in enumerate(decision.steps, start=1):
        kept = ", ".join(step.kept) if step.kept else "-"
        out.print(f" {number}. {step.stage}/{step.plugin}: kept [{kept}]", markup=False)
        for region, why in step.dropped.items():
            out.print(f"      dropped {region}: {why}", markup=False)
        if step.note:
            out.print(f"      {step.note}", markup=False)
    if decision.regions:
        addresses = []
        for region in decision.regions:
            r = policy.region(region)
            addresses += [*r.endpoints_v4, *r.endpoints_v6]
        answer = f"{', '.join(decision.regions)} ({', '.join(addresses)})"
    else:
        answer = "nothing (NODATA)"
    scope = f"/{decision.scope_prefix}" if decision.location_dependent else "/0 (any client)"
    out.print(f"answer: {answer}; reason: {decision.reason}; ttl {decision.ttl:g}s; "
              f"ECS scope {scope}", markup=False)


def _count(items, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _fail(message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(2)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
