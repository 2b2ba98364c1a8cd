"""Start one worker process with an embedded beat for a policy (``director workers``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from policies.model import Policy
from workers.app import create_app
from workers.config import WorkerSettings
from workers.policy_source import PolicyFile, PolicySource, StaticPolicy, policy_source
from workers.schedule import queues as policy_queues
from workers.schedule import region_queue

DEFAULT_POOL = "threads"  # tasks wait on the probe loop; threads are cheap and share one store
DEFAULT_CONCURRENCY = 16  # tasks at once; each GPU task is a whole batch of probes


def worker_argv(
    queues: Sequence[str], *, pool: str, concurrency: int, loglevel: str, beat: bool = True
) -> list[str]:
    """The ``celery worker`` arguments ``run_worker`` uses."""
    argv = ["worker", "-Q", ",".join(queues), "--pool", pool, "--concurrency", str(concurrency)]
    argv += ["--loglevel", loglevel, "--without-gossip", "--without-mingle", "--without-heartbeat"]
    if beat:
        argv.append("--beat")
    return argv


def resolve_queues(policy: Policy, queues: Sequence[str] | None) -> list[str]:
    """The ``probes.<region>`` queues to serve: every region's when ``queues`` is empty.

    Items may be queue names (``probes.eu-west``), bare region names (``eu-west``) or
    comma-separated lists of either (``--queues eu-west,us-east``). An item that names no
    region of the policy raises ValueError: a worker on a misspelt queue would idle silently.
    """
    known = policy_queues(policy)
    wanted: list[str] = []
    for item in queues or ():
        for name in filter(None, (part.strip() for part in item.split(","))):
            queue = name if name in known else region_queue(name)
            if queue not in known:
                raise ValueError(
                    f"queue {name!r} is not a region's probe queue; "
                    f"the policy's are: {', '.join(known) or '(no regions)'}"
                )
            if queue not in wanted:
                wanted.append(queue)
    return wanted or known


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
    follow_policy: bool = True,
) -> None:
    """Run a Celery worker (and beat) probing ``policy_path`` (or ``policy``); blocks until
    the worker shuts down (SIGTERM/SIGINT: warm shutdown), then returns.

    The policy file is loaded before the worker starts: a missing or invalid file raises
    :class:`policies.PolicyError` (``render()`` gives the diagnostics); beat then reloads it
    when it changes, and the version stored in Redis wins once there is one (unless
    ``follow_policy`` is off: see :class:`workers.policy_source.StoredPolicy`). The worker
    serves the
    ``probes.<region>`` queue of every region in the policy unless ``queues`` narrows it
    (see :func:`resolve_queues`; an unknown queue or a call with neither path nor policy
    raises ValueError). Other settings (state prefix,
    vantage, balancer URLs) come from ``settings``, else the ``DIRECTOR_*`` environment.
    Equivalent to ``celery -A workers.app worker --beat -Q ...`` with ``DIRECTOR_POLICY`` and
    ``DIRECTOR_REDIS_URL`` set.
    """
    base = settings or WorkerSettings.from_env()
    settings = replace(
        base,
        redis_url=redis_url,
        policy_path=str(policy_path) if policy_path is not None else base.policy_path,
        follow_policy=follow_policy,
    )
    source: PolicySource
    if policy is None:
        if settings.policy_path is None:
            raise ValueError("run_worker needs a policy path or a policy")
        source = PolicyFile.loaded(settings.policy_path)  # raises PolicyError
        assert source.policy is not None
        policy = source.policy
    else:
        source = StaticPolicy(policy)
    source = policy_source(source, settings)
    serve = resolve_queues(policy, queues)
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (got {concurrency})")
    app = create_app(settings)
    app.conf.director_policy_source = source
    argv = worker_argv(serve, pool=pool, concurrency=concurrency, loglevel=loglevel, beat=beat)
    app.worker_main(argv)
