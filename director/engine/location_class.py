"""Which GeoIP records a policy's decisions cannot tell apart.

The engine reads a client's location in three places only: whether it was found (unknown
location rules, all-down), its place (through ``policies.matching.coverage``: the residency
rules each service's clients are or may be under, and whether the unknown-location path
takes them), and, for services steered by ``geo``, its coordinates, which the geo scorer
turns into scores that ranking only ever compares. So two records decide alike, under every
health and load state, when they agree on::

    (found, per service: its coverage (located, the indices of the rules holding the
     record, of those that only may), coordinates known, regions of geo-steered services
     grouped and ordered by score)

Which services read coordinates is what their steering methods declare
(``engine.registry.Input.COORDINATES``). For ``geo`` the ranking above is exact (its formula
is the geo scorer's); a method of another kind that reads coordinates gets the record's
coordinates themselves in the class, which is never wrong, only less compact.

``director.geo_merge`` merges database blocks of one class into the widest network, which
becomes the ECS scope of answers that depended on location.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from director.engine.registry import Input, SteeringMethod, register_builtin_plugins
from director.engine.scorers.geo_distance import HALF_CIRCUMFERENCE_KM, great_circle_km
from director.geo import RecordFields
from policies.matching import Place, coverage, place
from policies.model import Policy

_UNLOCATED = ("unlocated",)
GEO = "geo"  # the method whose formula the ranking classes reproduce
_MEMO_LIMIT = 200_000


def location_classifier(
    policy: Policy, methods: Mapping[str, SteeringMethod] | None = None
) -> Callable[[RecordFields], Hashable]:
    """A function from a record's fields to its decision class under ``policy`` (with its
    steering ``methods``: the built-in ones by default)."""
    places, exact = _coordinates_read(policy, methods)
    ruled = [service for service in policy.services if service.residency]

    rules_memo: dict[tuple[str | None, str | None, str | None], tuple] = {}
    ranking_memo: dict[tuple[float, float], tuple] = {}

    def covered(where: Place) -> tuple:
        out = []
        for service in ruled:
            held = coverage(policy, service, where)
            out.append((held.located,
                        tuple(i for i, rule in enumerate(service.residency)
                              if rule in held.rules),
                        tuple(i for i, rule in enumerate(service.residency)
                              if rule in held.partial)))
        return tuple(out)

    def classify(fields: RecordFields) -> Hashable:
        key = (fields.country, fields.continent, fields.represented)
        rules = rules_memo.get(key)
        if rules is None:
            where = place(*key)
            rules = rules_memo[key] = covered(where) if where.known else _UNLOCATED
        if rules is _UNLOCATED:
            return _UNLOCATED
        if not places and not exact:
            return rules, ()
        if fields.latitude is None or fields.longitude is None:
            return rules, None
        point = (fields.latitude, fields.longitude)
        if exact:
            return rules, point
        ranking = ranking_memo.get(point)
        if ranking is None:
            if len(ranking_memo) >= _MEMO_LIMIT:
                ranking_memo.clear()
            ranking = ranking_memo[point] = _ranking(*point, places)
        return rules, ranking

    return classify


def classifier_key(policy: Policy,
                   methods: Mapping[str, SteeringMethod] | None = None) -> Hashable:
    """What ``location_classifier(policy, methods)`` depends on of the policy: two policies
    with equal keys classify every record alike (so a network map built for one serves
    the other)."""
    places, exact = _coordinates_read(policy, methods)
    ruled = tuple((service.residency, service.partial_location,
                   tuple(policy.jurisdiction(name)
                                          for rule in service.residency
                                          for name in rule.clients.jurisdictions))
                  for service in policy.services if service.residency)
    return places, exact, ruled


def _coordinates_read(policy: Policy, methods: Mapping[str, SteeringMethod] | None
                      ) -> tuple[tuple[tuple[str, float, float], ...], bool]:
    """How the classes read coordinates: the regions of geo-steered services with their
    locations (ranked by distance), and whether another method reading coordinates steers
    some service (then the coordinates themselves go into the class)."""
    methods = methods if methods is not None else register_builtin_plugins()
    reading = {name for name, m in methods.items() if Input.COORDINATES in m.reads}
    geo_regions = sorted({name for service in policy.services if GEO in service.steer
                          for name in service.regions})
    exact = any(set(service.steer) & (reading - {GEO}) for service in policy.services)
    return tuple((name, policy.region(name).latitude, policy.region(name).longitude)
                 for name in geo_regions), exact


def _ranking(latitude: float, longitude: float,
             places: Sequence[tuple[str, float, float]]) -> tuple[tuple[str, ...], ...]:
    """Region names grouped by equal geo score, best group first (the scorer's formula)."""
    scores: dict[float, list[str]] = {}
    for name, region_lat, region_lon in places:
        km = great_circle_km(latitude, longitude, region_lat, region_lon)
        scores.setdefault(max(0.0, 1.0 - km / HALF_CIRCUMFERENCE_KM), []).append(name)
    return tuple(tuple(scores[score]) for score in sorted(scores, reverse=True))
