"""Which residency rules a client falls under, for every shape of client location.

One function, ``coverage``, decides this for the DNS engine, the balancers' re-check and
their overflow; the proofs check it. A client reaches it as a ``Place``: the set of
locations it may be at, built by ``place`` from what GeoIP or an edge said.

Shapes of location and their place (``docs/policy-language.md``, "How clients match"):

- **a country** (ISO 3166-1 alpha-2, or XK): that country; a record that also names a
  *represented* country (a military base abroad) may be either;
- **a continent only** (GeoIP networks such as anycast or multi-country blocks): somewhere
  on that continent, country unknown;
- **nowhere**: no record, no ECS with ``no-ecs unknown``, a code nobody knows (``XX``,
  ``ZZ``, ``T1``, ``EU`` as a country), or a record that locates no client (an anonymous
  proxy or a satellite provider: the country MaxMind gives is the exit's, not the client's).
  A registered country is never a location (it is who holds the block).

A rule's clients are countries and continents (directly or through jurisdictions); a
country is on the continent ``policies.continents`` gives (MaxMind's assignment). A rule
**surely** covers a client when every location of its place is one of its clients (a
country it lists or on a continent it lists; a continent it lists), and **may** cover it
when some location could be (also: a continent on which it lists a country). A client
under rules that may but do not surely cover it has a *partial* location:

- ``partial-location intersect`` (the default): it is served only where every rule it may
  fall under allows (the intersection; nothing when that is empty);
- ``partial-location unknown``: it is treated as a client of unknown location.

A client of unknown location may be any rule's client: it gets the service's
``unknown-location`` answers, within every rule's allowed set. A located client under no
rule is unrestricted. No shape is ever "located but matching nothing" unless no rule could
hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from policies.continents import CONTINENT_OF
from policies.model import PartialLocation, Policy, ResidencyRule, Service, UnknownKind

CONTINENTS = frozenset({"AF", "AN", "AS", "EU", "NA", "OC", "SA"})


class Place(NamedTuple):
    """Where a client may be: in one of ``countries``, or somewhere on one of
    ``continents`` (country unknown). Both empty: nowhere known."""

    countries: frozenset[str] = frozenset()
    continents: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        return bool(self.countries or self.continents)

    def describe(self) -> str:
        """``DE``, ``EU (continent only)``, ``CU or US``, ``unknown``."""
        parts = sorted(self.countries) + [f"{c} (continent only)"
                                          for c in sorted(self.continents)]
        return " or ".join(parts) or "unknown"

    def __or__(self, other: Place) -> Place:
        return Place(self.countries | other.countries, self.continents | other.continents)


NOWHERE = Place()


def is_country(code: str | None) -> bool:
    """An ISO 3166-1 alpha-2 code a location can be (XK for Kosovo included)."""
    return code in CONTINENT_OF


def place(country: str | None, continent: str | None = None,
          represented: str | None = None) -> Place:
    """The place of a client that GeoIP or an edge puts in ``country`` (else on
    ``continent``), maybe representing ``represented``; codes are taken upper case, and a
    code nobody knows counts as absent."""
    country = country.upper() if country else None
    represented = represented.upper() if represented else None
    countries = frozenset(c for c in (country, represented) if c and is_country(c))
    if country and is_country(country):
        return Place(countries)
    continent = continent.upper() if continent else None
    continents = frozenset((continent,)) if continent in CONTINENTS else frozenset()
    return Place(countries, continents)


@dataclass(frozen=True)
class RuleClients:
    """The places a rule names, jurisdictions expanded."""

    countries: frozenset[str]
    continents: frozenset[str]

    def surely(self, where: Place) -> bool:
        """Every location of ``where`` is one of these clients (``where`` known)."""
        return where.known and all(
            c in self.countries or CONTINENT_OF.get(c) in self.continents
            for c in where.countries) and all(k in self.continents for k in where.continents)

    def maybe(self, where: Place) -> bool:
        """Some location of ``where`` could be one of these clients."""
        if any(c in self.countries or CONTINENT_OF.get(c) in self.continents
               for c in where.countries):
            return True
        return any(k in self.continents or k in self._country_continents
                   for k in where.continents)

    @property
    def _country_continents(self) -> frozenset[str]:
        return frozenset(CONTINENT_OF[c] for c in self.countries if c in CONTINENT_OF)


def rule_clients(policy: Policy, rule: ResidencyRule) -> RuleClients:
    """The countries and continents ``rule`` names, directly or through jurisdictions."""
    countries = set(rule.clients.countries)
    continents = set(rule.clients.continents)
    for name in rule.clients.jurisdictions:
        jurisdiction = policy.jurisdiction(name)
        if jurisdiction is not None:
            countries |= jurisdiction.countries
            continents |= jurisdiction.continents
    return RuleClients(frozenset(countries), frozenset(continents))


@dataclass(frozen=True)
class Coverage:
    """How a service's residency rules hold one client.

    ``rules``: every rule it is or may be under (the engine's and explain's "rules");
    ``partial``: those of them it only may be under; ``located``: False when the
    unknown-location path applies (an unknown place, or a partial one under
    ``partial-location unknown``); ``allowed``: the regions it may be answered with and
    served by, in the service's order (None: unrestricted)."""

    rules: tuple[ResidencyRule, ...]
    partial: tuple[ResidencyRule, ...]
    located: bool
    allowed: tuple[str, ...] | None


def coverage(policy: Policy, service: Service, where: Place) -> Coverage:
    """The residency rules of ``service`` that hold a client at ``where``, and where it may
    go (see the module docstring)."""
    if not where.known:
        return Coverage((), (), False, unknown_allowed(service))
    rules: list[ResidencyRule] = []
    partial: list[ResidencyRule] = []
    for rule in service.residency:
        clients = rule_clients(policy, rule)
        if clients.surely(where):
            rules.append(rule)
        elif clients.maybe(where):
            rules.append(rule)
            partial.append(rule)
    if partial and service.partial_location is PartialLocation.UNKNOWN:
        return Coverage(tuple(rules), tuple(partial), False, unknown_allowed(service))
    if not rules:
        return Coverage((), (), True, None)
    allowed = set(service.regions)
    for rule in rules:
        allowed &= set(rule.allowed)
    return Coverage(tuple(rules), tuple(partial), True,
                    tuple(r for r in service.regions if r in allowed))


def unknown_answers(service: Service) -> tuple[str, ...]:
    """What ``unknown-location`` answers, before residency."""
    unknown = service.unknown_location
    if unknown.kind is UnknownKind.REFUSE:
        return ()
    if unknown.kind is UnknownKind.REGIONS:
        return unknown.regions
    return service.regions


def unknown_allowed(service: Service) -> tuple[str, ...]:
    """Where a client of unknown location may go: what ``unknown-location`` answers,
    within every rule's allowed set (it may be any rule's client)."""
    allowed = set(unknown_answers(service))
    for rule in service.residency:
        allowed &= set(rule.allowed)
    return tuple(r for r in service.regions if r in allowed)


def serving(policy: Policy, region: str, model: str | None) -> tuple[Service, ...]:
    """The services whose clients ``region``'s GPUs serve ``model`` for (None: any model):
    those serving the region, with no ``models`` list or one naming the model."""
    return tuple(s for s in policy.services if region in s.regions
                 and (model is None or not s.models or model in s.models))


def refusal(policy: Policy, region: str, where: Place,
            model: str | None) -> tuple[Service | None, Coverage | None] | None:
    """Why ``region`` may not serve a client at ``where`` for ``model``, or None when it
    may: residency follows the GPUs, so every service the region serves the model for
    must allow it. ``(None, None)``: no service serves the model there."""
    services = serving(policy, region, model)
    if not services:
        return None, None
    for service in services:
        held = coverage(policy, service, where)
        if held.allowed is not None and region not in held.allowed:
            return service, held
    return None
