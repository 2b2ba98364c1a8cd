# SPDX-License-Identifier: Apache-2.0
"""Everything a run needs from the running system, gathered before anything is injected.

``prepare`` reads ``/api/v1/status`` and ``/api/v1/services`` into a ``Topology``, resolves
each fault's target (failing on an empty target or one outside the blast radius), plans
its admin API calls, reads the tenants the drill sends as (``/api/v1/tenants``: their
quotas set the floods' rates), finds the cohorts' client subnets in the GeoIP database and
computes the arrival schedule. Any problem here is an ``error`` verdict with nothing injected.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from director.geo import GeoDatabaseError, GeoLocator
from drills.admin import AdminClient
from drills.arrivals import Schedule, build_schedule
from drills.cohorts import ResolvedCohort, resolve_cohorts
from drills.errors import DrillError, TargetError
from drills.faults import Plan, Resolved, plan_fault, resolve_target
from drills.model import CheckType, Drill
from drills.tenant_keys import TenantInfo, flood_rates, read_tenants
from drills.topology import Topology, topology_from_status


@dataclass
class Prepared:
    drill: Drill
    topology: Topology
    status: dict[str, Any]
    plans: dict[str, Plan]                       # fault id -> plan
    restore_targets: dict[str, Resolved]         # target name -> resolved, for restore steps
    cohorts: dict[str, ResolvedCohort]
    allowed: dict[str, frozenset[str] | None]    # cohort -> allowed regions
    schedule: Schedule
    tenants: dict[str, TenantInfo] = field(default_factory=dict)   # of the running policy
    flood_rates: dict[str, float] = field(default_factory=dict)    # fault id -> rps

    @property
    def quotas(self) -> dict[str, float | None]:
        """Requests per minute each tenant of the running policy may send (None: no
        limit)."""
        return {name: t.requests_per_minute for name, t in self.tenants.items()}


def _known_regions(drill: Drill, topology: Topology) -> None:
    names = set(topology.names)
    for c in drill.load.cohorts:
        if c.residency:
            for r in c.residency.regions:
                if r not in names:
                    raise DrillError(f"cohort {c.name}: residency region '{r}' is not in the "
                                     f"running system ({', '.join(sorted(names))})")
    for check in drill.checks:
        listed = []
        if check.type is CheckType.REGION_HEALTH:
            listed = [*check.params.get("healthy", ()), *check.params.get("unhealthy", ())]
        elif check.type is CheckType.TRAFFIC_SHARE:
            listed = list(check.params.get("regions", ()))
        elif check.type is CheckType.FAILOVER_TIME:
            listed = list(check.params.get("surviving", ()))
        unknown = [r for r in listed if r not in names]
        if unknown:
            raise DrillError(f"check {check.name}: unknown region(s) {', '.join(unknown)} "
                             f"(running: {', '.join(sorted(names))})")


async def prepare(drill: Drill, admin: AdminClient,
                  locator: GeoLocator | None = None) -> Prepared:
    status = await admin.status()
    services = await admin.services()
    topology = topology_from_status(status, services, drill.load.service)
    _known_regions(drill, topology)
    rng = random.Random(f"targets:{drill.load.seed}")
    plans = {}
    for fault in drill.injected_faults:
        if fault.target is None:
            resolved = Resolved()
        else:
            resolved = resolve_target(drill.targets[fault.target], topology,
                                      drill.blast_radius, rng)
        plans[fault.id] = plan_fault(fault, resolved, drill.fault_ttl(fault))
    restore_targets = {}
    for step in drill.restore.steps:
        if step.target is not None:
            try:
                restore_targets[step.target] = resolve_target(
                    drill.targets[step.target], topology, drill.blast_radius, rng)
            except TargetError:
                restore_targets[step.target] = Resolved(skipped=True)
    try:
        locator = locator or GeoLocator(drill.load.geoip)
    except GeoDatabaseError as exc:
        raise DrillError(str(exc)) from None
    cohorts = {c.name: c for c in resolve_cohorts(drill.load.cohorts, locator,
                                                   drill.load.seed)}
    allowed = {c.name: topology.allowed(c.residency) for c in drill.load.cohorts}
    for name, regions in allowed.items():
        if regions is not None and not regions:
            raise DrillError(f"cohort {name}: its residency allows no region of the running "
                             f"system")
    tenants = await read_tenants(drill, admin)
    rates = flood_rates(drill, tenants)
    schedule = build_schedule(drill.load, drill.faults, flood_rates=rates)
    return Prepared(drill, topology, status, plans, restore_targets, cohorts, allowed,
                    schedule, tenants, rates)
