"""The beat schedule, built in one place from a policy.

GPU servers are probed in batches: one entry per (region, probe kind, interval, slot), whose
task probes all of its servers concurrently and writes their results in one pipeline
(:mod:`workers.probes.batch`). Regional balancers and latency have one target per region::

    gpu-health:{region}/{interval}s#{slot}   director.probe.gpu_health_batch   gpu interval
    gpu-metrics:{region}/{interval}s#{slot}  director.probe.gpu_metrics_batch  gpu interval
    balancer:{region}                        director.probe.balancer           balancer interval
    latency:{region}                         director.probe.latency            max(5 s, balancer)
    gpu-versions:{region}                    director.probe.gpu_versions       gpu interval

A region's version probe covers all its GPU servers in one task (a mixed pool is judged
over the whole region: ``workers.probes.versions``), at the shortest of their intervals.

Jitter is deterministic (CRC-32 of names, so every beat computes the same schedule and the
same fire times after a restart):

- every GPU server has its own phase in ``[0, interval)`` (:func:`target_phase`); the interval
  is cut into :func:`slot_count` slots of about :data:`SLOT_SECONDS` and a server belongs to
  the slot its phase falls in. Servers thus spread evenly over the slots;
- a slot's entry fires inside its slot, at an offset drawn from the entry's region and kind
  (:func:`slot_phase`), so the slots of different regions do not fire together either: a
  server is probed less than one slot width away from its own phase;
- a balancer or latency entry fires at its own phase (:func:`phase_for` of its name).

Entries are routed to the queue ``probes.{region}`` (a region's probes can run on workers
inside it) and expire after 1.5x their interval (a probe that waited longer is superseded by
the next one). Removing a GPU server from the policy removes it from its slot's entry (and the
entry itself when it was the slot's last server).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from policies.model import Policy
from workers.phased import phased
from workers.targets import GpuTarget, probe_targets

EXPIRY_FACTOR = 1.5
SLOT_SECONDS = 0.25  # target width of a slot: a server fires at most this far from its phase
MAX_BATCH = 200  # more servers than this per slot on average: more slots

GPU_HEALTH = "gpu-health"
GPU_METRICS = "gpu-metrics"

GPU_HEALTH_BATCH_TASK = "director.probe.gpu_health_batch"
GPU_METRICS_BATCH_TASK = "director.probe.gpu_metrics_batch"
BALANCER_TASK = "director.probe.balancer"
LATENCY_TASK = "director.probe.latency"
GPU_VERSIONS_TASK = "director.probe.gpu_versions"

BATCH_TASKS = {GPU_HEALTH: GPU_HEALTH_BATCH_TASK, GPU_METRICS: GPU_METRICS_BATCH_TASK}


def region_queue(region: str) -> str:
    return f"probes.{region}"


def phase_for(name: str, interval: float) -> float:
    """Deterministic offset in ``[0, interval)`` for the entry or target called ``name``."""
    return interval * (zlib.crc32(name.encode()) / 2**32)


def slot_count(interval: float, servers: int) -> int:
    """Slots the interval is cut into for ``servers`` GPU servers of one region and kind."""
    return max(1, math.ceil(interval / SLOT_SECONDS - 1e-9), math.ceil(servers / MAX_BATCH))


def target_phase(kind: str, region: str, gpu: str, interval: float) -> float:
    """A GPU server's own phase for probe ``kind`` (``gpu-health`` or ``gpu-metrics``)."""
    return phase_for(f"{kind}:{region}/{gpu}", interval)


def slot_of(phase: float, interval: float, slots: int) -> int:
    """The slot a phase in ``[0, interval)`` falls in."""
    return min(slots - 1, int(phase / interval * slots))


def batch_name(kind: str, region: str, interval: float, slot: int) -> str:
    return f"{kind}:{region}/{interval:g}s#{slot}"


def slot_phase(kind: str, region: str, interval: float, slot: int, slots: int) -> float:
    """Where in its slot ``[slot, slot + 1) * interval / slots`` a batch entry fires."""
    width = interval / slots
    return slot * width + phase_for(f"{kind}:{region}/{interval:g}s", width)


def _entry(
    task: str, args: tuple[Any, ...], region: str, interval: float, phase: float
) -> dict[str, Any]:
    return {
        "task": task,
        "schedule": phased(interval, phase),
        "args": args,
        "options": {"queue": region_queue(region), "expires": EXPIRY_FACTOR * interval},
    }


def _batches(kind: str, gpus: Sequence[GpuTarget]) -> dict[str, dict[str, Any]]:
    groups: dict[tuple[str, float], list[GpuTarget]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.region, gpu.interval), []).append(gpu)
    entries: dict[str, dict[str, Any]] = {}
    for (region, interval), members in groups.items():
        slots = slot_count(interval, len(members))
        by_slot: dict[int, list[dict[str, Any]]] = {}
        for gpu in members:
            phase = target_phase(kind, region, gpu.name, interval)
            by_slot.setdefault(slot_of(phase, interval, slots), []).append(gpu.to_dict())
        for slot in sorted(by_slot):
            entries[batch_name(kind, region, interval, slot)] = _entry(
                BATCH_TASKS[kind],
                (by_slot[slot],),
                region,
                interval,
                slot_phase(kind, region, interval, slot, slots),
            )
    return entries


def build_schedule(
    policy: Policy,
    *,
    balancer_port: int = 80,
    balancer_urls: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Beat entries (``beat_schedule`` format) for every probe of ``policy``."""
    targets = probe_targets(policy, balancer_port=balancer_port, balancer_urls=balancer_urls)
    entries = _batches(GPU_HEALTH, targets.gpus)
    entries.update(_batches(GPU_METRICS, [g for g in targets.gpus if g.metrics_path is not None]))
    by_region: dict[str, list[GpuTarget]] = {}
    for gpu in targets.gpus:
        by_region.setdefault(gpu.region, []).append(gpu)
    for region, members in by_region.items():
        name = f"gpu-versions:{region}"
        interval = min(gpu.interval for gpu in members)
        entries[name] = _entry(GPU_VERSIONS_TASK, ([gpu.to_dict() for gpu in members],),
                               region, interval, phase_for(name, interval))
    for balancer in targets.balancers:
        name = f"balancer:{balancer.region}"
        entries[name] = _entry(
            BALANCER_TASK,
            (balancer.to_dict(),),
            balancer.region,
            balancer.interval,
            phase_for(name, balancer.interval),
        )
    for latency in targets.latency:
        name = f"latency:{latency.region}"
        entries[name] = _entry(
            LATENCY_TASK,
            (latency.to_dict(),),
            latency.region,
            latency.interval,
            phase_for(name, latency.interval),
        )
    return entries


def queues(policy: Policy) -> list[str]:
    """Every probe queue of ``policy``, for a worker that probes all regions."""
    return [region_queue(region.name) for region in policy.regions]
