"""Probe tasks: thin wrappers over :mod:`workers.probes`; they return nothing.

Each task takes its target (a batch task: its list of targets) as plain dicts (JSON), builds
the typed targets and calls one probe function; the Celery task id is the probe id, so a
redelivered task does not count twice in the rise/fall streaks. GPU servers are probed in
batches, one task per region and kind (:mod:`workers.schedule`).
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from celery.signals import worker_process_shutdown, worker_shutdown

from state.store import StateStore
from workers.config import WorkerSettings
from workers.probes.balancer_check import check_balancer
from workers.probes.batch import probe_gpu_health_batch, scrape_gpu_metrics_batch
from workers.probes.latency import measure_latency
from workers.probes.session import shared_session
from workers.probes.versions import probe_versions
from workers.schedule import (
    BALANCER_TASK,
    GPU_HEALTH_BATCH_TASK,
    GPU_METRICS_BATCH_TASK,
    GPU_VERSIONS_TASK,
    LATENCY_TASK,
)
from workers.targets import BalancerTarget, GpuTarget, LatencyTarget


class ProbeTask(Task):
    """Base task holding one state store per worker process, opened on first use."""

    abstract = True
    _store: StateStore | None = None

    @property
    def settings(self) -> WorkerSettings:
        return self.app.conf.get("director_settings") or WorkerSettings.from_env()

    @property
    def store(self) -> StateStore:
        store = self._store
        if store is None:
            settings = self.settings
            store = StateStore.from_url(settings.redis_url, prefix=settings.state_prefix)
            type(self)._store = store
        return store


_OPTIONS: dict[str, Any] = {"base": ProbeTask, "bind": True, "ignore_result": True}


@shared_task(name=GPU_HEALTH_BATCH_TASK, **_OPTIONS)
def gpu_health_batch(self: ProbeTask, targets: list[dict[str, Any]]) -> None:
    gpus = [GpuTarget.from_dict(target) for target in targets]
    probe_gpu_health_batch(self.store, gpus, probe_id=self.request.id or "")


@shared_task(name=GPU_METRICS_BATCH_TASK, **_OPTIONS)
def gpu_metrics_batch(self: ProbeTask, targets: list[dict[str, Any]]) -> None:
    scrape_gpu_metrics_batch(self.store, [GpuTarget.from_dict(target) for target in targets])


@shared_task(name=GPU_VERSIONS_TASK, **_OPTIONS)
def gpu_versions(self: ProbeTask, targets: list[dict[str, Any]]) -> None:
    probe_versions(self.store, [GpuTarget.from_dict(target) for target in targets])


@shared_task(name=BALANCER_TASK, **_OPTIONS)
def balancer(self: ProbeTask, target: dict[str, Any]) -> None:
    check_balancer(self.store, BalancerTarget.from_dict(target), probe_id=self.request.id or "")


@shared_task(name=LATENCY_TASK, **_OPTIONS)
def latency(self: ProbeTask, target: dict[str, Any]) -> None:
    # A worker that stands for no client network has no latency worth steering anyone by:
    # from a data centre every region looks near, and 0.0.0.0/0 would apply it to everyone.
    if not self.settings.vantage:
        return
    measure_latency(self.store, LatencyTarget.from_dict(target), vantage=self.settings.vantage)


@worker_shutdown.connect
@worker_process_shutdown.connect
def _close_probe_session(**_: Any) -> None:
    shared_session().close()
