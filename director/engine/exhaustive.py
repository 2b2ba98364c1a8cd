"""Run the engine itself over every health and load combination to confirm residency.

The policy proof (``policies.residency``) reasons about paths; this check executes the real
decision pipeline for a representative client of every residency rule (one per jurisdiction,
country and continent it names, placed at each region's location so every region gets to be
nearest) and for an unlocated client, under every combination of regions up and down
(2^n for n regions of the service, capped) times loads (all under quota, all over, each one
over alone), and reports any answer outside the rule's allowed set.
"""

from __future__ import annotations

import ipaddress
import itertools
from dataclasses import dataclass

from director.engine.pipeline import Engine
from director.engine.snapshot import RegionState, Snapshot
from director.engine.types import Client, ClientSource
from director.geo import Location
from policies.model import Policy, ResidencyRule, Service

MAX_EXHAUSTIVE_REGIONS = 10


@dataclass(frozen=True)
class Violation:
    service: str
    rule: str
    client: str
    down: tuple[str, ...]
    hot: tuple[str, ...]
    answer: tuple[str, ...]
    allowed: tuple[str, ...]

    def describe(self) -> str:
        return (f"service {self.service}, rule {self.rule}: client {self.client} with "
                f"down={list(self.down)} hot={list(self.hot)} got {list(self.answer)}, "
                f"allowed {list(self.allowed)}")


def check_engine_residency(policy: Policy) -> tuple[list[Violation], int]:
    """All violations found and the number of decisions run."""
    engine = Engine(policy)
    violations: list[Violation] = []
    decisions = 0
    for service in policy.services:
        if not service.residency:
            continue
        clients = list(_clients(policy, service))
        for snapshot, down, hot in _states(service):
            for rule, label, client in clients:
                decision = engine.decide(service, client, snapshot)
                decisions += 1
                allowed = _allowed(service, rule)
                if any(region not in allowed for region in decision.regions):
                    violations.append(Violation(service.name, rule.name if rule else "*",
                                                label, down, hot, decision.regions, allowed))
    return violations, decisions


def _allowed(service: Service, rule: ResidencyRule | None) -> tuple[str, ...]:
    if rule is not None:
        return rule.allowed
    allowed = set(service.regions)
    for each in service.residency:
        allowed &= set(each.allowed)
    return tuple(allowed)


def _states(service: Service):
    regions = service.regions[:MAX_EXHAUSTIVE_REGIONS]
    loads: list[tuple[str, ...]] = [(), tuple(regions), *((r,) for r in regions)]
    threshold = service.spillover.threshold if service.spillover else 1.0
    for bits in itertools.product((True, False), repeat=len(regions)):
        down = tuple(r for r, up in zip(regions, bits, strict=True) if not up)
        for hot in loads:
            states = {
                r: RegionState(healthy=r not in down,
                               utilization=threshold * (3.0 if r in hot else 0.5))
                for r in regions
            }
            yield Snapshot(1, states), down, hot


_PLACEHOLDER = ipaddress.ip_address("192.0.2.1")


def _clients(policy: Policy, service: Service):
    network = ipaddress.ip_network("192.0.2.0/24")
    for rule in service.residency:
        places = [(c, None) for c in sorted(rule.clients.countries)]
        places += [(None, c) for c in sorted(rule.clients.continents)]
        for name in sorted(rule.clients.jurisdictions):
            jurisdiction = policy.jurisdiction(name)
            if jurisdiction is not None:
                places += [(c, None) for c in sorted(jurisdiction.countries)[:3]]
                places += [(None, c) for c in sorted(jurisdiction.continents)]
        for (country, continent), region_name in itertools.product(places, service.regions):
            region = policy.region(region_name)
            location = Location(country, continent, region.latitude, region.longitude, network)
            for index in range(4):  # a few subnets, so spillover hashing goes both ways
                address = ipaddress.ip_address(int(_PLACEHOLDER) + index * 256)
                client = Client(address, ipaddress.ip_network((address, 24), strict=False),
                                ClientSource.ECS, location)
                yield rule, f"{country or continent}@{region_name}#{index}", client
    unknown = Location(None, None, None, None, network)
    yield None, "unknown", Client(_PLACEHOLDER, network, ClientSource.RESOLVER, unknown)
    yield None, "no-location", Client(_PLACEHOLDER, network, ClientSource.ECS, None)
