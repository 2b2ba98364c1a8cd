"""Pure derivation of the global tier's :class:`Snapshot` from the last known records.

Per region:

- ``healthy``: None when nothing is known yet (never probed); False when the balancer is
  known down, or when the region has GPU servers and every one is known down; else True.
- ``degraded``: some, not all, of its GPU servers are known down, or its balancer is up but
  failed its last probe (suspect: one more failure may take it down). Answers on it get the
  service's short ``degraded-ttl``, so a client holds a region that is going down for
  ``degraded-ttl`` rather than ``ttl`` after it is declared down.
- ``utilization``: as the region's balancer last published it; None if it never did.
- ``draining``: an operator drain flag is set on the region.
- ``down_endpoints``: the endpoints (of a region with several, each with its balancer)
  whose own probe record says down; DNS answers the others while one is left.
- ``stale``: some record the region's state rests on (balancer health, GPU health, published
  load) is older than ``stale_after``. The last known values are kept, whatever their age:
  missing or old data never turns a region down by itself (fail-static), it only sets
  ``stale`` so that metrics, logs and ``explain`` say so.

Latency: vantage network -> region -> ms, for regions of the policy, kept when old (an old
RTT still ranks regions better than none).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from director.engine.snapshot import RegionState, Snapshot
from policies.model import Policy, Region
from state.records import HealthRecord
from state.view import StateView, balanced_endpoints


@dataclass(frozen=True)
class RegionAge:
    """How old the oldest record behind a region's state is (None: no record yet)."""

    region: str
    age: float | None


def region_state(
    region: Region, view: StateView, *, now: float, stale_after: float
) -> tuple[RegionState, float | None]:
    """One region's state and the age of its oldest record."""
    balancer = view.balancer_health.get(region.name)
    gpus = [view.gpu_health.get((region.name, gpu.name)) for gpu in region.gpus]
    load = view.region_load.get(region.name)

    known_gpus = [h for h in gpus if h is not None and h.up is not None]
    down = sum(1 for h in known_gpus if h.up is False)
    balancer_known = balancer is not None and balancer.up is not None
    all_gpus_down = bool(region.gpus) and down == len(region.gpus)

    healthy: bool | None = None
    if balancer_known or known_gpus:
        balancer_down = balancer is not None and balancer.up is False
        healthy = not (balancer_down or all_gpus_down)

    ages = [r.age(now) for r in (balancer, *gpus, load) if r is not None]
    oldest = max(ages) if ages else None
    state = RegionState(
        healthy=healthy,
        utilization=load.utilization if load is not None else None,
        draining=region.name in view.drains.regions,
        stale=oldest is not None and oldest > stale_after,
        degraded=(down > 0 and not all_gpus_down) or _suspect(balancer),
        down_endpoints=frozenset(
            address for address in balanced_endpoints(region)
            if (record := view.endpoint_health.get((region.name, address))) is not None
            and record.up is False),
    )
    return state, oldest


def _suspect(balancer: HealthRecord | None) -> bool:
    return balancer is not None and balancer.up is True and balancer.fail_streak > 0


def build_snapshot(
    policy: Policy, view: StateView, *, now: float, version: int
) -> tuple[Snapshot, list[RegionAge]]:
    """The snapshot for ``policy`` and the age of each region's oldest record."""
    regions: dict[str, RegionState] = {}
    ages: list[RegionAge] = []
    for region in policy.regions:
        state, age = region_state(region, view, now=now, stale_after=policy.stale_after)
        regions[region.name] = state
        ages.append(RegionAge(region.name, age))

    known = set(policy.region_names)
    latency: dict[str, dict[str, float]] = {}
    for (vantage, target), sample in sorted(view.latency.items()):
        if target in known:
            latency.setdefault(vantage, {})[target] = sample.ms
    snapshot = Snapshot(
        version=version,
        regions=MappingProxyType(regions),
        latency=MappingProxyType({v: MappingProxyType(m) for v, m in latency.items()}),
    )
    return snapshot, ages


def same_state(a: Snapshot, b: Snapshot) -> bool:
    """True when two snapshots differ at most in version (no swap needed)."""
    return dict(a.regions) == dict(b.regions) and {k: dict(v) for k, v in a.latency.items()} == {
        k: dict(v) for k, v in b.latency.items()
    }
