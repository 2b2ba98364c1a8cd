"""The beat schedule, built in one place from a policy.

One entry per probe, named by what it probes::

    gpu-health:{region}/{gpu}     director.probe.gpu_health    every gpu check interval
    gpu-metrics:{region}/{gpu}    director.probe.gpu_metrics   every gpu check interval
    balancer:{region}             director.probe.balancer      balancer interval
    latency:{region}              director.probe.latency       max(5 s, balancer interval)

Each entry fires at a deterministic phase in ``[0, interval)`` derived from its name (CRC-32),
so probes do not fire in lock-step and every beat computes the same phases. Entries are routed
to the queue ``probes.{region}`` (a region's probes can run on workers inside it) and expire
after 1.5x their interval (a probe that waited longer is superseded by the next one).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from policies.model import Policy
from workers.phased import phased
from workers.targets import probe_targets

EXPIRY_FACTOR = 1.5

GPU_HEALTH_TASK = "director.probe.gpu_health"
GPU_METRICS_TASK = "director.probe.gpu_metrics"
BALANCER_TASK = "director.probe.balancer"
LATENCY_TASK = "director.probe.latency"


def region_queue(region: str) -> str:
    return f"probes.{region}"


def phase_for(name: str, interval: float) -> float:
    """Deterministic offset in ``[0, interval)`` for the entry called ``name``."""
    return interval * (zlib.crc32(name.encode()) / 2**32)


def _entry(name: str, task: str, target: Mapping[str, Any], region: str, interval: float) -> dict:
    return {
        "task": task,
        "schedule": phased(interval, phase_for(name, interval)),
        "args": (dict(target),),
        "options": {"queue": region_queue(region), "expires": EXPIRY_FACTOR * interval},
    }


def build_schedule(
    policy: Policy,
    *,
    balancer_port: int = 80,
    balancer_urls: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Beat entries (``beat_schedule`` format) for every probe of ``policy``."""
    targets = probe_targets(policy, balancer_port=balancer_port, balancer_urls=balancer_urls)
    entries: dict[str, dict[str, Any]] = {}
    for gpu in targets.gpus:
        where = f"{gpu.region}/{gpu.name}"
        entries[f"gpu-health:{where}"] = _entry(
            f"gpu-health:{where}", GPU_HEALTH_TASK, gpu.to_dict(), gpu.region, gpu.interval
        )
        if gpu.metrics_path is not None:
            entries[f"gpu-metrics:{where}"] = _entry(
                f"gpu-metrics:{where}", GPU_METRICS_TASK, gpu.to_dict(), gpu.region, gpu.interval
            )
    for balancer in targets.balancers:
        name = f"balancer:{balancer.region}"
        entries[name] = _entry(
            name, BALANCER_TASK, balancer.to_dict(), balancer.region, balancer.interval
        )
    for latency in targets.latency:
        name = f"latency:{latency.region}"
        entries[name] = _entry(
            name, LATENCY_TASK, latency.to_dict(), latency.region, latency.interval
        )
    return entries


def queues(policy: Policy) -> list[str]:
    """Every probe queue of ``policy``, for a worker that probes all regions."""
    return [region_queue(region.name) for region in policy.regions]
