"""Which residency rules a client falls under, from its country and continent."""

from __future__ import annotations

from director.geo import Location
from policies.model import Policy, ResidencyRule, Service
from policies.residency import rules_for


def matching_rules(policy: Policy, service: Service,
                   location: Location | None) -> tuple[ResidencyRule, ...]:
    """The service's residency rules whose clients include ``location``.

    An unlocated client matches nothing here; the residency filter treats it as possibly
    any rule's client.
    """
    if location is None or not location.found:
        return ()
    return rules_for(policy, service, location.country, location.continent)
