"""Start one worker process with an embedded beat for a policy (``director workers``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from policies.model import Policy
from workers.app import create_app
from workers.config import WorkerSettings
from workers.policy_source import PolicyFile, StaticPolicy
from workers.schedule import queues as policy_queues

DEFAULT_POOL = "threads"  # probes wait on sockets; threads are cheap and share one store
DEFAULT_CONCURRENCY = 16


def worker_argv(
    queues: Sequence[str], *, pool: str, concurrency: int, loglevel: str, beat: bool = True
) -> list[str]:
    """The ``celery worker`` arguments ``run_worker`` uses."""
    argv = ["worker", "-Q", ",".join(queues), "--pool", pool, "--concurrency", str(concurrency)]
    argv += ["--loglevel", loglevel, "--without-gossip", "--without-mingle", "--without-heartbeat"]
    if beat:
        argv.append("--beat")
    return argv


def run_worker(
    policy_path: str | os.PathLike[str] | None,
    redis_url: str,
    *,
    policy: Policy | None = None,
    settings: WorkerSettings | None = None,
    queues: Sequence[str] | None = None,
    pool: str = DEFAULT_POOL,
    concurrency: int = DEFAULT_CONCURRENCY,
    loglevel: str = "INFO",
    beat: bool = True,
) -> None:
    """Run a Celery worker (and beat) probing ``policy_path`` (or ``policy``); blocks.

    The worker serves the ``probes.<region>`` queue of every region in the policy unless
    ``queues`` narrows it. Equivalent to ``celery -A workers.app worker --beat -Q ...`` with
    ``DIRECTOR_POLICY`` and ``DIRECTOR_REDIS_URL`` set.
    """
    base = settings or WorkerSettings.from_env()
    settings = replace(
        base,
        redis_url=redis_url,
        policy_path=str(policy_path) if policy_path is not None else base.policy_path,
    )
    if policy is None:
        if settings.policy_path is None:
            raise ValueError("run_worker needs a policy path or a policy")
        source: PolicyFile | StaticPolicy = PolicyFile(settings.policy_path)
        policy = PolicyFile(settings.policy_path).poll()  # first poll loads or raises
        if policy is None:
            raise ValueError(f"{settings.policy_path}: no policy loaded")
    else:
        source = StaticPolicy(policy)
    app = create_app(settings)
    app.conf.director_policy_source = source
    argv = worker_argv(
        queues or policy_queues(policy),
        pool=pool,
        concurrency=concurrency,
        loglevel=loglevel,
        beat=beat,
    )
    app.worker_main(argv)
