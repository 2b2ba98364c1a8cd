"""``director workers``: one Celery worker with beat running the policy's probes."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from director.console import plain_console

err = plain_console(stderr=True)


def workers(
    policy: Annotated[Path, typer.Option("--policy", help="Policy file whose targets to probe.")],
    redis_url: Annotated[str | None, typer.Option("--redis", help="Redis URL (default: start "
                                                  "an embedded Valkey on loopback).")] = None,
    queues: Annotated[list[str] | None, typer.Option("--queue", help="Only serve these queues, "
                                                     "e.g. probes.eu-west (repeatable).")] = None,
    concurrency: Annotated[int, typer.Option(help="Worker threads.")] = 16,
    beat: Annotated[bool, typer.Option(help="Also run the beat schedule in this process.")] = True,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    follow_policy: Annotated[bool, typer.Option(
        "--follow-policy", help="Probe what the policy stored in Redis names (set by "
        "`director up` or PUT /api/v1/policy) once there is one: the default.")] = False,
    no_follow_policy: Annotated[bool, typer.Option(
        "--no-follow-policy", help="Probe what the policy file names only (tests, special "
        "cases).")] = False,
) -> None:
    """Run a probe worker (and beat) for POLICY; the same as `celery -A workers.app worker
    --beat` with DIRECTOR_POLICY and DIRECTOR_REDIS_URL set."""
    from policies import PolicyError
    from state.credentials import redacted
    from state.embedded import EmbeddedValkey
    from state.errors import StateError
    from workers.runner import run_worker

    if follow_policy and no_follow_policy:
        err.print("error: --follow-policy and --no-follow-policy contradict each other",
                  markup=False)
        raise typer.Exit(2)
    with contextlib.ExitStack() as stack:
        if redis_url is None:
            try:
                server = stack.enter_context(EmbeddedValkey())
            except StateError as exc:
                err.print(f"error: cannot start the embedded Valkey: {exc}", markup=False)
                raise typer.Exit(1) from None
            redis_url = server.url
            err.print(f"embedded Valkey at {redacted(redis_url)}", markup=False)
        try:
            run_worker(str(policy), redis_url, queues=queues or None, concurrency=concurrency,
                       beat=beat, loglevel=loglevel, follow_policy=not no_follow_policy)
        except PolicyError as exc:
            err.print(exc.render(), markup=False)
            raise typer.Exit(1) from None
        except ValueError as exc:
            err.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
