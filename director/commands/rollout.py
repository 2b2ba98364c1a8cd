"""``director rollout``: roll a new revision of a model out through the admin API.

``start`` sends the rollout (``POST /api/v1/rollouts``); ``status`` shows one or every
rollout with its step, last gate results and history; ``pause``, ``resume``, ``abort``
and ``clear`` act on one. Exit 0 done, 1 refused by the API (its message printed), 2 the
API could not be reached.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from director.console import plain_console

app = typer.Typer(help="Roll a new revision of a model out, step by step, with analysis "
                       "gates and automatic rollback.", no_args_is_help=True)
out = plain_console()
err = plain_console(stderr=True)

Api = Annotated[str, typer.Option("--api", envvar="DIRECTOR_API",
                                  help="Admin API base URL (or DIRECTOR_API).")]
Token = Annotated[str, typer.Option("--token", envvar="DIRECTOR_API_TOKEN",
                                    help="API token (or DIRECTOR_API_TOKEN); admin to act.")]
TIMEOUT_S = 30.0


def _call(api: str, token: str, method: str, path: str, body: Any = None) -> Any:
    request = urllib.request.Request(
        f"{api.rstrip('/')}/api/v1/rollouts{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        err.print(f"error: {exc.code}: {message}", markup=False)
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        err.print(f"error: {api}: {exc}", markup=False)
        raise typer.Exit(2) from None


def _describe(rollout: dict[str, Any]) -> None:
    spec = rollout["spec"]
    out.print(f"{rollout['id']}  {spec['model']}: {spec['baseline']} -> {spec['candidate']}  "
              f"{rollout['status']} at {rollout['percent']:g} %  "
              f"(steps {', '.join(f'{s:g}' for s in spec['steps'])}; every "
              f"{spec['interval_s']:g} s; regions {', '.join(spec['regions'])})", markup=False)
    if rollout.get("reason"):
        out.print(f"  reason: {rollout['reason']}", markup=False)
    for result in rollout.get("last_results", []):
        out.print(f"  {result['gate']:<15} {result['verdict']:<13} {result['detail']}",
                  markup=False)


def _gates(values: list[str] | None) -> list[dict[str, Any]] | None:
    if not values:
        return None
    gates = []
    for item in values:
        name, _, rest = item.partition("=")
        threshold, _, samples = rest.partition(":")
        try:
            gate: dict[str, Any] = {"name": name, "threshold": float(threshold)}
            if samples:
                gate["min_samples"] = int(samples)
        except ValueError:
            raise typer.BadParameter(f"expected NAME=THRESHOLD[:MIN_SAMPLES], got {item!r}",
                                     param_hint="--gate") from None
        gates.append(gate)
    return gates


@app.command()
def start(
    model: Annotated[str, typer.Argument(help="The model name clients ask for.")],
    baseline: Annotated[str, typer.Argument(help="The revision serving it now.")],
    candidate: Annotated[str, typer.Argument(help="The revision to roll out.")],
    api: Api, token: Token,
    region: Annotated[list[str] | None, typer.Option(
        "--region", help="Only this region (repeatable; default: every region whose GPU "
        "servers declare both revisions).")] = None,
    steps: Annotated[str, typer.Option(help="Percents of the traffic to the candidate, "
                                            "the last 100.")] = "1,5,25,50,100",
    interval: Annotated[float, typer.Option(help="Seconds each step is judged over.")] = 60.0,
    blue_green: Annotated[bool, typer.Option(
        "--blue-green", help="One step to 100 %, started only when every server of the "
        "candidate is up and not drained; judged against the baseline before the switch.")
    ] = False,
    gate: Annotated[list[str] | None, typer.Option(
        "--gate", help="NAME=THRESHOLD[:MIN_SAMPLES], repeatable (ttft-p95, itl-p95, "
        "error-rate, finish-reasons, output-length); default: all five.")] = None,
) -> None:
    """Start rolling CANDIDATE out in place of BASELINE for MODEL."""
    try:
        percents = [float(s) for s in steps.split(",")]
    except ValueError:
        raise typer.BadParameter(f"expected percents like 1,5,25,50,100, got {steps!r}",
                                 param_hint="--steps") from None
    body: dict[str, Any] = {"model": model, "baseline": baseline, "candidate": candidate,
                            "regions": region or [], "steps": [100.0] if blue_green else percents,
                            "interval_s": interval, "require_ready": blue_green}
    gates = _gates(gate)
    if gates is not None:
        body["gates"] = gates
    _describe(_call(api, token, "POST", "", body))


@app.command()
def status(api: Api, token: Token,
           rollout: Annotated[str | None, typer.Argument(help="One rollout's id.")] = None,
           as_json: Annotated[bool, typer.Option("--json", help="The API's JSON.")] = False,
           ) -> None:
    """Every rollout (or one): its step, last gate results and, with --json, history."""
    answer = _call(api, token, "GET", f"/{rollout}" if rollout else "")
    if as_json:
        out.print(json.dumps(answer, indent=2), markup=False)
        return
    for item in [answer] if rollout else answer["rollouts"]:
        _describe(item)


def _action(name: str, method: str, suffix: str, help_text: str) -> None:
    def act(rollout: Annotated[str, typer.Argument(help="The rollout's id.")],
            api: Api, token: Token) -> None:
        answer = _call(api, token, method, f"/{rollout}{suffix}")
        if "status" in answer:
            _describe(answer)
        else:
            out.print(f"{rollout}: cleared", markup=False)

    act.__doc__ = help_text
    app.command(name=name)(act)


_action("pause", "POST", "/pause", "Hold a running rollout at its step.")
_action("resume", "POST", "/resume", "Resume a paused rollout (its step's window restarts).")
_action("abort", "POST", "/abort", "Roll back now: the baseline takes all the traffic.")
_action("clear", "DELETE", "", "Forget a finished rollout and withdraw its split (once the "
                               "policy says what it should).")
