"""The ``director`` command: the one composition point that wires the tiers together."""

from __future__ import annotations

import typer

from director.commands import api, dns, drill, policy, region, state, up, workers

app = typer.Typer(
    help="director: a multi-region traffic director for AI inference.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(policy.app, name="policy")
app.command(name="workers")(workers.workers)
app.add_typer(region.app, name="region")
app.add_typer(dns.app, name="dns")
app.add_typer(drill.app, name="drill")
app.add_typer(api.app, name="api")
app.command(name="up")(up.up)
app.add_typer(state.app, name="state")


def main() -> None:
    """Console-script entry point."""
    app()
