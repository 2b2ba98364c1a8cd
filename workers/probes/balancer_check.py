"""Check a region's balancer: its health endpoint, and the load it reports there.

Health goes through the same rise/fall hysteresis as GPU servers (the balancer's record).
A balancer publishes its region's load to the state itself about once a second; when its
health answer is a JSON object with the load fields (``queue_depth``, ``in_flight``,
``outstanding_seconds``, ``capacity``, ``utilization``) the check stores that too, as that
balancer's record (named by its URL), so a balancer that cannot reach the state server
still has its load seen.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from state.hysteresis import ProbeOutcome
from state.records import RegionLoad
from state.store import StateStore
from workers.probes.http import HttpResult
from workers.probes.http_health import check
from workers.targets import BalancerTarget

LOAD_FIELDS = ("queue_depth", "in_flight", "outstanding_seconds", "capacity", "utilization")


@dataclass(frozen=True)
class BalancerStatus:
    outcome: ProbeOutcome
    load: RegionLoad | None


def load_from_body(body: bytes, *, now: float) -> RegionLoad | None:
    """The load a health answer carries, or None if it is not a JSON object with all fields."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        queue_depth, in_flight, outstanding, capacity, utilization = (
            float(data[name]) for name in LOAD_FIELDS)
    except (KeyError, TypeError, ValueError):
        return None
    return RegionLoad(queue_depth, in_flight, outstanding, capacity, utilization, now)


def check_balancer(
    store: StateStore, target: BalancerTarget, *, probe_id: str = ""
) -> BalancerStatus:
    """Probe a region's balancer, record its health and, if reported, its load. A region
    with several balancers (``target.endpoints``) has each probed and its health recorded
    apart, for DNS to leave a dead one out; the region's balancer is up while any answers."""
    now = time.time()
    urls = (target.url, *target.alternates)
    results = []
    for index, url in enumerate(urls):
        ok, result = check(url, target.health_path, expect=target.expect,
                           timeout=target.timeout)
        results.append((url, ok, result))
        if len(target.endpoints) == len(urls):
            _record(store, target, now, probe_id, ok, result, endpoint=target.endpoints[index])
        elif ok:  # nothing kept per endpoint: the first that answers will do
            break
    answered, ok, result = next(((u, o, r) for u, o, r in results if o), results[-1])
    outcome = _record(store, target, now, probe_id, ok, result)
    load = load_from_body(result.body, now=now) if ok else None
    if load is not None:
        store.write_region_load(target.region, load, source=answered)
    return BalancerStatus(outcome, load)


def _record(store: StateStore, target: BalancerTarget, now: float, probe_id: str, ok: bool,
            result: HttpResult, endpoint: str | None = None) -> ProbeOutcome:
    error = result.error or ("" if ok else f"status {result.status}, expected {target.expect}")
    return store.record_probe(target.region, None, ok=ok, rise=target.rise, fall=target.fall,
                              now=now, probe_id=probe_id, status=result.status,
                              latency_ms=result.elapsed_ms, error=error, endpoint=endpoint)
