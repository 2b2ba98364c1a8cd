"""The ``director`` command: the one composition point that wires the tiers together."""

from __future__ import annotations

import importlib
import sys

import typer

# name: (module, attribute, a command group or a single command); imported only when used,
# so that ``director dns serve`` does not load the balancer's and the API's libraries (each
# process director starts pays for what it imports, and ``up`` starts many)
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "policy": ("director.commands.policy", "app", True),
    "workers": ("director.commands.workers", "workers", False),
    "region": ("director.commands.region", "app", True),
    "dns": ("director.commands.dns", "app", True),
    "dnssec": ("director.commands.dnssec", "app", True),
    "drill": ("director.commands.drill", "app", True),
    "api": ("director.commands.api", "app", True),
    "up": ("director.commands.up", "up", False),
    "state": ("director.commands.state", "app", True),
    "rollout": ("director.commands.rollout", "app", True),
    "traces": ("director.commands.traces", "app", True),
    "slo": ("director.commands.slo", "app", True),
    "lab": ("director.commands.lab", "app", True),
}


def build_app(only: str | None = None) -> typer.Typer:
    """The command with every subcommand, or with ``only`` that one (what ``main`` runs
    when the command line names it)."""
    command = typer.Typer(
        help="director: a multi-region traffic director for AI inference.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )

    @command.callback()
    def _group() -> None:  # a group even with one command: ``director up`` stays ``up``
        pass

    for name, (module, attribute, group) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(module), attribute)
        if group:
            command.add_typer(target, name=name)
        else:
            command.command(name=name)(target)
    return command


def __getattr__(name: str) -> typer.Typer:
    # ``from director.cli import app``: the whole command, built on first use
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


def main() -> None:
    """Console-script entry point."""
    named = sys.argv[1] if len(sys.argv) > 1 else None
    build_app(named if named in COMMANDS else None)()
