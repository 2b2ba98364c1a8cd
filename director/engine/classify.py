"""Which residency rules a client falls under, from its country and continent."""

from __future__ import annotations

from director.geo import Location
from policies.model import Policy, ResidencyRule, Service


def matching_rules(policy: Policy, service: Service,
                   location: Location | None) -> tuple[ResidencyRule, ...]:
    """The service's residency rules whose clients include ``location``.

    A rule matches when the client's country or continent is listed, directly or through a
    named jurisdiction. An unlocated client matches nothing here; the residency filter treats
    it as possibly any rule's client.
    """
    if location is None or not location.found:
        return ()
    return tuple(rule for rule in service.residency if _covers(policy, rule, location))


def _covers(policy: Policy, rule: ResidencyRule, location: Location) -> bool:
    country, continent = location.country, location.continent
    clients = rule.clients
    if country in clients.countries or continent in clients.continents:
        return True
    for name in clients.jurisdictions:
        jurisdiction = policy.jurisdiction(name)
        if jurisdiction is None:
            continue
        if country in jurisdiction.countries or continent in jurisdiction.continents:
            return True
    return False
