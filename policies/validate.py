"""Semantic checks on a compiled policy: names resolve, nothing is declared twice, values agree.

Residency is proved separately (``policies.residency``); this module checks everything else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Protocol

from policies.errors import did_you_mean
from policies.model import Policy, SourcePos, Tenant
from policies.reading import Ref, Reporter


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def pos(self) -> SourcePos: ...


def validate(policy: Policy, refs: Iterable[Ref], report: Reporter) -> None:
    """Report every semantic problem of ``policy`` to ``report``."""
    _unique("region", policy.regions, report)
    _unique("service", policy.services, report)
    _unique("healthcheck", policy.healthchecks, report)
    _unique("jurisdiction", policy.jurisdictions, report)
    _unique("GPU server", [gpu for region in policy.regions for gpu in region.gpus], report)
    for service in policy.services:
        _unique("residency rule", service.residency, report, f"service {service.name}: ")
    _references(policy, refs, report)
    _zone(policy, report)
    for service in policy.services:
        _service(policy, service, report)
    _unique("tenant", policy.tenants, report)
    for tenant in policy.tenants:
        _tenant_regions(policy, tenant, report)
    _reserves(policy, report)


def _unique(kind: str, items: Iterable[_Named], report: Reporter, prefix: str = "") -> None:
    seen: dict[str, SourcePos] = {}
    for item in items:
        if item.name in seen:
            first = seen[item.name]
            report.at_name(item.pos, f"{prefix}{kind} '{item.name}' is declared twice",
                           hint=f"the first declaration is at {first}; rename or remove one")
        else:
            seen[item.name] = item.pos


def _references(policy: Policy, refs: Iterable[Ref], report: Reporter) -> None:
    known = {
        "region": policy.region_names,
        "service": tuple(s.name for s in policy.services),
        "healthcheck": tuple(h.name for h in policy.healthchecks),
        "jurisdiction": tuple(j.name for j in policy.jurisdictions),
        "tenant": tuple(t.name for t in policy.tenants),
    }
    for ref in refs:
        names = known[ref.kind]
        if ref.name in names:
            continue
        hint = did_you_mean(ref.name, names)
        if hint is None and ref.kind == "jurisdiction":
            hint = f"declare it: jurisdiction {ref.name} {{ countries ... }}"
            if re.fullmatch(r"[A-Z]{2}", ref.name):
                hint = (f"for clients in the country {ref.name} write 'clients country "
                        f"{ref.name}'; or {hint}")
        listed = ", ".join(names) if names else "none declared"
        report.at(ref.pos, f"unknown {ref.kind} '{ref.name}'", length=ref.width,
                  expected=f"a {ref.kind} declared in this policy ({listed})", hint=hint)


def _zone(policy: Policy, report: Reporter) -> None:
    apex = policy.zone.apex
    for ns in policy.zone.nameservers:
        inside = ns.name == apex or ns.name.endswith("." + apex)
        if inside and not ns.addresses:
            report.at_name(ns.pos, f"name server '{ns.name}' is inside the zone but has no glue "
                      "address", expected=f"ns {ns.name} <address> ...",
                      hint="resolvers cannot find a name server inside the zone without glue")
        if not inside and ns.addresses:
            report.at_name(ns.pos, f"glue for '{ns.name}', which is outside the zone {apex}",
                      expected=f"ns {ns.name}",
                      hint="glue is only served for names inside the zone; drop the addresses")


def _service(policy: Policy, service, report: Reporter) -> None:
    apex = policy.zone.apex
    if service.name != apex and not service.name.endswith("." + apex):
        report.at_name(service.pos, f"service '{service.name}' is outside the zone {apex}",
                  expected=f"a name ending in .{apex}")
    if not service.regions:
        report.at_name(service.pos, f"service '{service.name}' has no regions",
                  expected="regions <region> ...")
    served = set(service.regions)
    declared = set(policy.region_names)
    for region in service.priority:
        if region in declared and region not in served:
            report.at_name(service.pos, f"priority names region '{region}', which does not "
                           f"serve {service.name}", child="priority", words=(region,),
                           hint="add it to 'regions' or drop it from 'priority'")
    if "weighted" in service.steer:
        weights = [policy.region(r).weight for r in service.regions if r in declared]
        if weights and not any(w > 0 for w in weights):
            report.at_name(service.pos, "steering by 'weighted' but every region of "
                           f"{service.name} has weight 0", child="steer", words=("weighted",),
                           expected="weight <number> above 0 on some region")
    if service.degraded_ttl > service.ttl:
        report.at_name(service.pos, f"degraded-ttl ({service.degraded_ttl:g}s) is longer than "
                       f"the ttl ({service.ttl:g}s)", child="degraded-ttl",
                       expected=f"at most the ttl ({service.ttl:g}s)",
                       hint="a degraded answer should be cached for less time, not more")
    spill = service.spillover
    if spill is not None and spill.targets:
        for target in spill.targets:
            if target in declared and target not in served:
                report.at_name(spill.pos, f"spillover target '{target}' does not serve "
                               f"{service.name}", child="to", words=(target,),
                               hint="add it to the service's 'regions', or drop it from 'to'")


def _tenant_regions(policy: Policy, tenant: Tenant, report: Reporter) -> None:
    """A tenant's ``regions`` may only narrow: each must serve one of the tenant's services,
    and each service it lists must run in one of them."""
    services = [s for s in policy.services if not tenant.services or s.name in tenant.services]
    if not services:
        return  # every service it names is unknown, and reported as such
    declared = set(policy.region_names)
    narrowing = False  # some region of the tenant serves one of its services
    for region in tenant.regions:
        if region not in declared:
            continue  # reported as unknown
        if any(region in s.regions for s in services):
            narrowing = True
            continue
        names = ", ".join(s.name for s in services)
        report.at_name(tenant.pos, f"tenant {tenant.name}: region '{region}' serves none "
                       "of its services", child="regions", words=(region,),
                       expected=f"a region that serves {names}",
                       hint="a tenant's regions may only narrow where its services run; "
                       f"drop {region} from 'regions'")
    if not narrowing:
        return  # no region of its list is usable: the errors above say so once per region
    for service in services if tenant.services else ():
        if not set(tenant.regions) & set(service.regions):
            report.at_name(tenant.pos, f"tenant {tenant.name}: none of its regions serves "
                           f"{service.name}, so its requests to it would always be refused",
                           child="services", words=(service.name,),
                           expected=f"a region of {service.name} in 'regions' "
                           f"({', '.join(service.regions)})",
                           hint="a tenant's regions may only narrow where its services run; "
                           f"add a region of {service.name} to 'regions', or drop it from "
                           "'services'")


def _reserves(policy: Policy, report: Reporter) -> None:
    """Together, the tenants' reserves are at most all of a region's capacity."""
    total = math.fsum(t.reserve for t in policy.tenants)
    if total <= 1.0 + 1e-9:
        return
    running = 0.0
    for tenant in policy.tenants:
        running += tenant.reserve
        if running > 1.0 + 1e-9:
            shares = ", ".join(f"{t.name} {_percent(t.reserve)}" for t in policy.tenants
                               if t.reserve > 0)
            report.at_name(tenant.pos, f"the tenants' reserves add up to {_percent(total)}, "
                           "more than 100% of a region's capacity", child="reserve",
                           words=(), expected="reserves that add up to at most 100%",
                           hint=f"{shares}: lower some")
            return


def _percent(share: float) -> str:
    return f"{round(share * 100, 6):g}%"
