"""``GET /api/v1/status``: regions with health, load and traffic share, every instance's
heartbeat (``state.instances``), and sample answers.

Region state comes from the refresher's snapshot (the same the DNS tier decides on); GPU
server detail (health, drain, KV-cache usage) is read from Redis per call. When Redis cannot
be read the answer still comes, from the last known snapshot, with ``reachable: false``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from director.api.samples import region_shares
from director.engine import Snapshot
from policies import Policy
from policies.model import Region
from state import AsyncStateStore, DrainFlags, GpuLoad, HealthRecord, RecordError
from state.instances import Instance

log = logging.getLogger(__name__)

GpuKey = tuple[str, str]


@dataclass(frozen=True)
class GpuFacts:
    """Per-GPU-server records read from Redis for one status call."""

    health: dict[GpuKey, HealthRecord] = field(default_factory=dict)
    load: dict[GpuKey, GpuLoad] = field(default_factory=dict)
    drains: DrainFlags = field(default_factory=DrainFlags)


async def read_gpu_facts(store: AsyncStateStore, policy: Policy) -> GpuFacts:
    """GPU health, load and drain flags in one round trip; raises ``StateError``."""
    keys = store.keys
    wanted: dict[str, tuple[str, GpuKey | None]] = {keys.drain: ("drain", None)}
    for region in policy.regions:
        for gpu in region.gpus:
            target = (region.name, gpu.name)
            wanted[keys.gpu_health(*target)] = ("health", target)
            wanted[keys.gpu_load(*target)] = ("load", target)
    fetched = await store.fetch(list(wanted))
    facts = GpuFacts(drains=DrainFlags.from_fields(fetched.get(keys.drain, {})))
    for key, raw in fetched.items():
        kind, maybe_target = wanted[key]
        try:
            if kind == "health" and maybe_target:
                facts.health[maybe_target] = HealthRecord.from_fields(raw)
            elif kind == "load" and maybe_target:
                facts.load[maybe_target] = GpuLoad.from_fields(raw)
        except RecordError as exc:
            log.warning("api: ignoring malformed record %s: %s", key, exc)
    return facts


@dataclass(frozen=True)
class StatusInputs:
    policy: Policy
    version: int
    name: str
    snapshot: Snapshot
    facts: GpuFacts | None  # None: Redis unreachable
    dns_listen: tuple[str, ...]
    balancer_port: int
    instances: tuple[Instance, ...] = ()  # heartbeats of every process (state.instances)


def build_status(inputs: StatusInputs, samples: list[dict[str, object]]) -> dict[str, object]:
    """The status document (see the contract's ``GET /api/v1/status``)."""
    policy, snapshot = inputs.policy, inputs.snapshot
    shares = region_shares(samples, policy.region_names)
    regions = [_region(r, inputs, shares[r.name]) for r in policy.regions]
    reachable = inputs.facts is not None
    stale = not reachable or any(snapshot.region(r.name).stale for r in policy.regions)
    now = time.time()
    return {
        "generated_at": now,
        "policy": {"version": inputs.version, "name": inputs.name, "zone": policy.zone.apex},
        "dns": {"listen": list(inputs.dns_listen)},
        "state": {"reachable": reachable, "snapshot_version": snapshot.version, "stale": stale},
        "regions": regions,
        "instances": [i.status(now) for i in inputs.instances],
        "samples": samples,
    }


def balancer_url(region: Region, port: int) -> str | None:
    if region.endpoints_v4:
        return f"http://{region.endpoints_v4[0]}:{port}"
    if region.endpoints_v6:
        return f"http://[{region.endpoints_v6[0]}]:{port}"
    return None


def _region(region: Region, inputs: StatusInputs, share: float) -> dict[str, object]:
    state = inputs.snapshot.region(region.name)
    facts = inputs.facts
    gpus = []
    for gpu in region.gpus:
        key = (region.name, gpu.name)
        health = facts.health.get(key) if facts else None
        load = facts.load.get(key) if facts else None
        gpus.append({
            "name": gpu.name, "url": gpu.url, "kind": gpu.kind, "models": list(gpu.models),
            "healthy": health.up if health else None,
            "draining": key in facts.drains.gpus if facts else None,
            "utilization": load.cache_usage if load else None,
            "waiting": load.waiting if load else None,
            "running": load.running if load else None,
        })
    return {
        "name": region.name, "jurisdiction": region.jurisdiction,
        "latitude": region.latitude, "longitude": region.longitude,
        "endpoints": [*region.endpoints_v4, *region.endpoints_v6],
        "balancer": balancer_url(region, inputs.balancer_port),
        "capacity_rps": region.capacity.rps,
        "healthy": state.healthy, "draining": state.draining, "degraded": state.degraded,
        "stale": state.stale, "utilization": state.utilization, "share": share,
        "gpus": gpus,
    }
