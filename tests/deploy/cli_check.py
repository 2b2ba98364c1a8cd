"""What the real command lines accept: the ``director`` typer app (introspected through the
click command typer builds) and ``python -m regions.simulator``'s argparse parser."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer.main
from deploy_files import CommandSite

from director.cli import app
from regions.simulator.__main__ import build_parser


@functools.cache
def director_command() -> Any:
    return typer.main.get_command(app)


def subcommands(command: Any) -> dict[str, Any]:
    """Sub-commands of a group (empty for a leaf); duck-typed, as typer may vendor click."""
    return dict(getattr(command, "commands", None) or {})


def leaf(path: Sequence[str]) -> Any:
    """The command at ``path`` (e.g. ('dns', 'serve')); KeyError if there is none."""
    command = director_command()
    for name in path:
        command = subcommands(command)[name]
    return command


def option_default(path: Sequence[str], option: str) -> Any:
    """The default of ``option`` (e.g. '--listen') of the command at ``path``."""
    for param in leaf(path).params:
        if option in (*param.opts, *param.secondary_opts):
            return param.default
    raise KeyError(f"director {' '.join(path)} has no option {option}")


def director_start(argv: Sequence[str]) -> int | None:
    """Index of the ``director`` program in argv (``/opt/director/bin/director``, after
    ``sudo -u director`` or ``docker compose exec api``), or None."""
    names = set(subcommands(director_command()))
    for i, token in enumerate(argv[:-1]):
        # the value of an option (``kubectl -n director rollout restart``, ``-u director``)
        # is a namespace or a user, not the program
        if i and argv[i - 1] in VALUE_OPTIONS:
            continue
        if Path(token).name == "director" and (argv[i + 1] in names or argv[i + 1] == "--help"):
            return i
    return None


VALUE_OPTIONS = frozenset({"-n", "--namespace", "-u", "--user", "-g", "--group"})


def check_director(argv: Sequence[str]) -> list[str]:
    """Problems of a ``director ...`` command line: unknown command or option, missing
    value, missing required option or argument."""
    start = director_start(argv)
    if start is None:
        return [f"not a director command: {' '.join(argv)}"]
    words = list(argv[start + 1:])
    command, path = director_command(), ["director"]
    while subcommands(command):
        if not words or words[0].startswith("-"):
            return [] if words[:1] == ["--help"] else [f"{' '.join(path)}: no sub-command"]
        name = words.pop(0)
        if name not in subcommands(command):
            return [f"{' '.join(path)}: no command '{name}' "
                    f"(has: {', '.join(sorted(subcommands(command)))})"]
        command, path = subcommands(command)[name], [*path, name]
    options = {}
    for param in command.params:
        if param.param_type_name == "option":
            for opt in (*param.opts, *param.secondary_opts):
                options[opt] = param
    given, positional, problems = set(), [], []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--help":
            return []
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            param = options.get(name)
            if param is None:
                problems.append(f"{' '.join(path)}: no option {name} "
                                f"(has: {', '.join(sorted(options))})")
            else:
                given.add(param.name)
                if not param.is_flag and "=" not in word:
                    if i + 1 >= len(words):
                        problems.append(f"{' '.join(path)}: {name} needs a value")
                    i += 1
        else:
            positional.append(word)
        i += 1
    for param in command.params:
        if param.required and param.param_type_name == "option" and param.name not in given:
            problems.append(f"{' '.join(path)}: required option {param.opts[0]} missing")
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    if any(p.required for p in arguments) and not positional:
        problems.append(f"{' '.join(path)}: missing {arguments[0].name.upper()}")
    return problems


@functools.cache
def simulator_options() -> dict[str, Any]:
    """Option string -> argparse action of ``python -m regions.simulator``."""
    return {opt: action for action in build_parser()._actions for opt in action.option_strings}


def simulator_start(argv: Sequence[str]) -> int | None:
    """Index of the first argument after ``python -m regions.simulator``, or None."""
    for i in range(len(argv) - 2):
        if Path(argv[i]).name.startswith("python") and argv[i + 1:i + 3] == ["-m",
                                                                            "regions.simulator"]:
            return i + 3
    return None


def check_simulator(argv: Sequence[str]) -> list[str]:
    start = simulator_start(list(argv))
    if start is None:
        return [f"not a simulator command: {' '.join(argv)}"]
    words, problems, i = list(argv[start:]), [], 0
    options = simulator_options()
    while i < len(words):
        name = words[i].split("=", 1)[0]
        action = options.get(name)
        if action is None:
            problems.append(f"python -m regions.simulator: no option {name} "
                            f"(has: {', '.join(sorted(options))})")
        elif action.nargs != 0 and "=" not in words[i]:
            i += 1
        i += 1
    return problems


def simulator_default(option: str) -> Any:
    return simulator_options()[option].default


# -- command lines found in the deployment files --------------------------------------


def ids(sites: list[CommandSite]) -> list[str]:
    return [site.where for site in sites]


def director_sites(sites: list[CommandSite]) -> list[CommandSite]:
    return [s for s in sites if director_start(s.argv) is not None]


def simulator_sites(sites: list[CommandSite]) -> list[CommandSite]:
    return [s for s in sites if simulator_start(list(s.argv)) is not None]


def sites_of(sites: list[CommandSite], *path: str) -> list[CommandSite]:
    """The director command lines running ``director <path...>``."""
    found = []
    for site in director_sites(sites):
        start = director_start(site.argv)
        if list(site.argv[start + 1:start + 1 + len(path)]) == list(path):
            found.append(site)
    return found


def simulators_by_gpu(sites: list[CommandSite]) -> dict[str, CommandSite]:
    return {site.option("--name"): site for site in simulator_sites(sites)}

