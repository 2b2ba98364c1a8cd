"""The probe workers: a Celery app (broker Redis) whose beat schedule comes from the policy
and whose tasks probe GPU servers and regional balancers, scrape engine metrics and measure
latency, writing what they find into the shared state (``state``).

Public API (loaded on first use, so ``import workers.targets`` does not start Celery)::

    create_app(settings)      the Celery app            workers.app
    run_worker(...)           a worker process          workers.runner
    WorkerSettings            broker, store, queues     workers.config
    probe_targets(policy)     what to probe, per region workers.targets
    WorkerError, MetricsError, PolicySourceError        workers.errors
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "create_app": "workers.app",
    "run_worker": "workers.runner",
    "resolve_queues": "workers.runner",
    "WorkerSettings": "workers.config",
    "probe_targets": "workers.targets",
    "GpuTarget": "workers.targets",
    "BalancerTarget": "workers.targets",
    "LatencyTarget": "workers.targets",
    "WorkerError": "workers.errors",
    "MetricsError": "workers.errors",
    "PolicySourceError": "workers.errors",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'workers' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
