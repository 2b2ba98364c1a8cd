"""``GET /api/v1/services``: the active policy's services, steering and residency rules."""

from __future__ import annotations

from typing import Any

from policies import Policy
from policies.model import ResidencyRule, Service


def describe_services(policy: Policy) -> dict[str, Any]:
    return {"zone": policy.zone.apex, "services": [_service(policy, s) for s in policy.services]}


def _service(policy: Policy, service: Service) -> dict[str, Any]:
    zone = policy.zone.apex
    short = service.name[: -len(zone) - 1] if service.name.endswith("." + zone) else service.name
    spill = service.spillover
    return {
        "service": short, "name": service.name, "regions": list(service.regions),
        "steering": list(service.steer), "priority": list(service.priority),
        "ttl": service.ttl, "degraded_ttl": service.degraded_ttl, "answers": service.answers,
        "spillover": None if spill is None else {
            "threshold": spill.threshold, "max_share": spill.max_share,
            "targets": list(spill.targets) if spill.targets is not None else None},
        "failover": {"fall": service.failover.fall, "rise": service.failover.rise},
        "affinity": service.affinity.value,
        "unknown_location": {"kind": service.unknown_location.kind.value,
                             "regions": list(service.unknown_location.regions)},
        "no_ecs": service.no_ecs.value,
        "all_down": {"kind": service.all_down.kind.value,
                     "regions": list(service.all_down.regions)},
        "rules": [_rule(rule) for rule in service.residency],
    }


def _rule(rule: ResidencyRule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "clients": {"jurisdictions": sorted(rule.clients.jurisdictions),
                    "countries": sorted(rule.clients.countries),
                    "continents": sorted(rule.clients.continents)},
        "allowed": list(rule.allowed),
        "all_down": {"kind": rule.all_down.kind.value, "regions": list(rule.all_down.regions)},
        "spillover_to": list(rule.spillover_to) if rule.spillover_to is not None else None,
        "where": str(rule.pos),
    }
