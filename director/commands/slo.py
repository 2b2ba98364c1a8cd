"""``director slo rules``: the policy's service level objectives as Prometheus recording
rules and burn-rate alerts (``director.slo.rules``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from director.console import plain_console

app = typer.Typer(help="Service level objectives.", no_args_is_help=True)
err = plain_console(stderr=True)


@app.command()
def rules(
    policy: Annotated[Path, typer.Argument(help="The policy file.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the rule file here "
                                             "(default: standard output).")] = None,
) -> None:
    """Write the Prometheus rule file for POLICY's ``slo`` blocks: error ratios over the
    alert windows and the period, the budget left, and the multi-window burn-rate alerts
    (check it with ``promtool check rules``)."""
    from director import policy_gate
    from director.slo.rules import rule_file, slo_instances

    acceptance = policy_gate.accept(str(policy))
    if acceptance.policy is None:
        err.print(acceptance.error().render(), markup=False)
        raise typer.Exit(1)
    instances = slo_instances(acceptance.policy)
    if not instances:
        err.print(f"warning: {policy} declares no 'slo' block: the rule file is empty",
                  markup=False)
    text = rule_file(acceptance.policy, policy.name)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.write_text(text, encoding="utf-8")
    err.print(f"wrote {len(instances)} SLOs ({len(instances) * 2} alerts) to {out}",
              markup=False)
