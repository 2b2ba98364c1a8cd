"""The decoded records a snapshot is derived from, as the refresher last read them.

Fail-static lives here: a key that is absent from a read keeps its last known record (it then
ages into staleness); only a policy change that removes a target forgets its records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from policies.model import Policy, Region
from state.errors import RecordError
from state.keys import KeyKind, Keys
from state.records import DrainFlags, HealthRecord, LatencySample, RawHash, RegionLoad
from state.region_load import combined_from_hash

log = logging.getLogger(__name__)


def balanced_endpoints(region: Region) -> tuple[str, ...]:
    """The endpoints of a region whose balancers are probed one by one: all of them when it
    has several (a balancer on each), none when it has one (its region health is its)."""
    endpoints = (*region.endpoints_v4, *region.endpoints_v6)
    return endpoints if len(endpoints) > 1 else ()


def snapshot_keys(keys: Keys, policy: Policy) -> list[str]:
    """Every key the global tier's snapshot reads for ``policy``."""
    names = [keys.latency, keys.drain]
    for region in policy.regions:
        names.append(keys.balancer_health(region.name))
        names.extend(keys.endpoint_health(region.name, address)
                     for address in balanced_endpoints(region))
        names.append(keys.region_load(region.name))
        names.extend(keys.gpu_health(region.name, gpu.name) for gpu in region.gpus)
    return names


@dataclass
class StateView:
    """Last known records by target; mutated only by the refresher's single task."""

    balancer_health: dict[str, HealthRecord] = field(default_factory=dict)
    endpoint_health: dict[tuple[str, str], HealthRecord] = field(default_factory=dict)
    gpu_health: dict[tuple[str, str], HealthRecord] = field(default_factory=dict)
    region_load: dict[str, RegionLoad] = field(default_factory=dict)
    latency: dict[tuple[str, str], LatencySample] = field(default_factory=dict)
    drains: DrainFlags = field(default_factory=DrainFlags)

    def apply(self, keys: Keys, fetched: Mapping[str, RawHash], asked: list[str]) -> None:
        """Merge one read: ``fetched`` holds the non-empty hashes among the ``asked`` keys."""
        for key in asked:
            raw = fetched.get(key)
            try:
                self._apply_one(keys, key, raw)
            except RecordError as exc:
                log.warning("state: ignoring malformed record %s: %s", key, exc)

    def _apply_one(self, keys: Keys, key: str, raw: RawHash | None) -> None:
        parsed = keys.parse(key)
        if parsed is None:
            return
        if parsed.kind is KeyKind.DRAIN:
            # An absent drain hash means nothing is drained, not "unknown".
            self.drains = DrainFlags.from_fields(raw or {})
            return
        if not raw:
            return
        match parsed.kind:
            case KeyKind.BALANCER_HEALTH if parsed.region:
                self.balancer_health[parsed.region] = HealthRecord.from_fields(raw)
            case KeyKind.ENDPOINT_HEALTH if parsed.region and parsed.address:
                self.endpoint_health[(parsed.region, parsed.address)] = (
                    HealthRecord.from_fields(raw))
            case KeyKind.GPU_HEALTH if parsed.region and parsed.gpu:
                self.gpu_health[(parsed.region, parsed.gpu)] = HealthRecord.from_fields(raw)
            case KeyKind.REGION_LOAD if parsed.region:
                load = combined_from_hash(raw)
                if load is not None:
                    self.region_load[parsed.region] = load
            case KeyKind.LATENCY:
                for name, value in raw.items():
                    sample = LatencySample.from_field(name, value)
                    self.latency[(sample.vantage, sample.region)] = sample

    def prune(self, policy: Policy) -> None:
        """Forget records of targets the policy no longer has."""
        regions = set(policy.region_names)
        gpus = {(r.name, g.name) for r in policy.regions for g in r.gpus}
        self.balancer_health = {k: v for k, v in self.balancer_health.items() if k in regions}
        endpoints = {(r.name, a) for r in policy.regions for a in balanced_endpoints(r)}
        self.endpoint_health = {k: v for k, v in self.endpoint_health.items()
                                if k in endpoints}
        self.region_load = {k: v for k, v in self.region_load.items() if k in regions}
        self.gpu_health = {k: v for k, v in self.gpu_health.items() if k in gpus}
        self.latency = {k: v for k, v in self.latency.items() if k[1] in regions}
