"""Every record of the bundled GeoIP databases, through the real matcher, for every rule of
the example policies: no record can be answered (DNS) or served (a balancer) outside a
jurisdiction it may belong to.

The records are the distinct records of GeoLite2 City 2018 (458,435 of them behind 3.4
million networks) and of MaxMind's test databases (``tests/geoip_records.py``). Each is read
as the product reads it (``director.geo.record_fields``) and decided by the real engine and
the real balancer check. What a record *may* be is worked out here independently, from the
raw record and the policy alone, by brute force over countries:

- a record marked anonymous proxy or satellite provider, or with neither a known country
  nor a continent: the client may be in any country;
- a record with a known country: that country, or its represented country;
- a record with a continent and no known country: any country on that continent.

A rule may hold the client when it names one of those countries or a continent one of them
is on; every such rule's ``allow`` list bounds where the client may go. The walk also checks
the data the matcher rests on: that ``policies.continents`` puts every country on the
continent the records do, and which continents have continent-only records.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from director.engine import Engine
from director.engine.snapshot import RegionState, Snapshot
from director.engine.types import Client, ClientSource
from director.geo import Location, default_database_path, record_fields
from policies import Policy, load_policy
from policies.continents import CONTINENT_OF, CONTINENT_ONLY_RECORDS
from policies.model import ResidencyRule, Service
from regions.balancer.tenancy.residency_check import ResidencyCheck
from tests.geoip_records import distinct_records

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("global.dp", "tenants/tenants.dp", "minimal.dp")
TEST_DATABASES = sorted((ROOT / "data" / "geoip" / "maxmind-test").glob("*-C*-Test.mmdb"))
CONTINENTS = frozenset(CONTINENT_OF.values())
EVERYWHERE = frozenset(CONTINENT_OF)
NETWORK = ipaddress.ip_network("192.0.2.0/24")


def _code(record: dict[str, Any], field: str, key: str = "iso_code") -> str | None:
    return (record.get(field) or {}).get(key)


def possible_countries(record: dict[str, Any]) -> frozenset[str]:
    """Where the client of ``record`` may be, read from the raw record."""
    traits = record.get("traits") or {}
    if traits.get("is_anonymous_proxy") or traits.get("is_satellite_provider"):
        return EVERYWHERE
    country, represented = _code(record, "country"), _code(record, "represented_country")
    also = {represented} if represented in CONTINENT_OF else set()
    if country in CONTINENT_OF:
        return frozenset({country, *also})
    continent = _code(record, "continent", "code")
    if continent in CONTINENTS:
        return frozenset({c for c, k in CONTINENT_OF.items() if k == continent} | also)
    return EVERYWHERE


def _holds(policy: Policy, rule: ResidencyRule, country: str) -> bool:
    countries, continents = set(rule.clients.countries), set(rule.clients.continents)
    for name in rule.clients.jurisdictions:
        jurisdiction = policy.jurisdiction(name)
        if jurisdiction is not None:
            countries |= jurisdiction.countries
            continents |= jurisdiction.continents
    return country in countries or CONTINENT_OF[country] in continents


def bound(policy: Policy, service: Service, possible: frozenset[str]) -> frozenset[str] | None:
    """The regions every rule that may hold the client allows (None: no rule may)."""
    allowed: frozenset[str] | None = None
    for rule in service.residency:
        if any(_holds(policy, rule, country) for country in possible):
            allowed = frozenset(rule.allowed) if allowed is None else \
                allowed & frozenset(rule.allowed)
    return allowed


def walk(paths: Iterable[str]) -> tuple[dict[tuple, tuple[Location, frozenset[str]]],
                                        set[tuple[str, str]], set[str], int]:
    """Distinct (record fields -> location, possible countries), country/continent pairs,
    continents of continent-only records, and how many records were read."""
    found: dict[tuple, tuple[Location, frozenset[str]]] = {}
    pairs: set[tuple[str, str]] = set()
    continent_only: set[str] = set()
    count = 0
    for path in paths:
        for record in distinct_records(path, ("country", "represented_country", "continent",
                                              "registered_country", "traits")):
            count += 1
            fields = record_fields(record)
            possible = possible_countries(record)
            key = (fields, possible)
            if key not in found:
                location = Location(fields.country, fields.continent, None, None, NETWORK,
                                    fields.represented)
                found[key] = (location, possible)
            country, continent = _code(record, "country"), _code(record, "continent", "code")
            if country and continent:
                pairs.add((country, continent))
            elif continent and not country:
                continent_only.add(continent)
    return found, pairs, continent_only, count


@pytest.fixture(scope="module")
def records():
    return walk([default_database_path(), *map(str, TEST_DATABASES)])


@pytest.fixture(scope="module")
def policies() -> dict[str, Policy]:
    return {name: load_policy(str(ROOT / "policies" / "examples" / name)) for name in EXAMPLES}


def test_the_walk_reads_every_kind_of_record(records) -> None:
    found, _, continent_only, count = records
    assert count > 458_000 and len(TEST_DATABASES) == 4
    kinds = {("anywhere" if possible == EVERYWHERE else "country" if len(possible) == 1
              else "represented" if len(possible) == 2 else "continent-only")
             for _, possible in found.values()}
    assert kinds == {"anywhere", "country", "represented", "continent-only"}
    assert continent_only


def test_countries_are_on_the_continents_the_records_say(records) -> None:
    _, pairs, continent_only, _ = records
    assert {(c, k) for c, k in pairs if CONTINENT_OF.get(c) != k} == set()
    assert continent_only == CONTINENT_ONLY_RECORDS


def _snapshots(service: Service, allowed: frozenset[str] | None) -> list[Snapshot]:
    regions = service.regions
    hot = service.spillover.threshold * 3 if service.spillover else 1.0
    states = [{r: RegionState(healthy=True) for r in regions},
              {r: RegionState(healthy=True, utilization=hot) for r in regions},
              {r: RegionState(healthy=False) for r in regions}]
    if allowed is not None:
        states.append({r: RegionState(healthy=r not in allowed, utilization=0.1)
                       for r in regions})
        states += [{r: RegionState(healthy=r == up) for r in regions}  # one forbidden up
                   for up in regions if up not in allowed]
    return [Snapshot(1, state) for state in states]


def test_no_record_is_answered_outside_a_jurisdiction_it_may_belong_to(records,
                                                                        policies) -> None:
    found, _, _, _ = records
    decisions = 0
    leaks: list[str] = []
    for name, policy in policies.items():
        engine = Engine(policy)
        for service in policy.services:
            if not service.residency:
                continue
            for location, possible in found.values():
                allowed = bound(policy, service, possible)
                snapshots = _snapshots(service, allowed)
                for region in service.regions:  # the client near each region in turn
                    spot = policy.region(region)
                    here = Location(location.country, location.continent, spot.latitude,
                                    spot.longitude, NETWORK, location.represented)
                    for index in range(2):  # two subnets: spillover's hash differs
                        address = ipaddress.ip_address(int(NETWORK[1]) + index * 256)
                        client = Client(address, ipaddress.ip_network((address, 24), False),
                                        ClientSource.ECS, here)
                        for snapshot in snapshots:
                            answer = engine.decide(service, client, snapshot,
                                                   explain=False).regions
                            decisions += 1
                            if allowed is not None and not set(answer) <= allowed:
                                down = [r for r, s in snapshot.regions.items()
                                        if not s.healthy]
                                leaks.append(f"{name} {service.name} {here.place.describe()}"
                                             f" down={down}: {answer}")
    assert not leaks, f"{len(leaks)} leaks, e.g. {leaks[:3]}"
    assert decisions > 20_000


def _no_lookup(address: Any) -> Any:
    raise AssertionError("the walk places clients itself")


def test_no_record_is_served_by_a_balancer_outside_a_jurisdiction_it_may_belong_to(
        records, policies) -> None:
    found, _, _, _ = records
    leaks: list[str] = []
    checked = 0
    for name, policy in policies.items():
        for region in policy.regions:
            check = ResidencyCheck(policy, region.name, _no_lookup)
            models = sorted({m for gpu in region.gpus for m in gpu.models}) or [None]
            for location, possible in found.values():
                for model in [*models, None]:
                    verdict = check.verdict(location.place, "walked", None, model)
                    checked += 1
                    if not verdict.allowed:
                        continue
                    for service in check.serving(model):
                        allowed = bound(policy, service, possible)
                        if allowed is not None and region.name not in allowed:
                            leaks.append(f"{name} {region.name} {model} {service.name} "
                                         f"{location.place.describe()}")
    assert not leaks, f"{len(leaks)} leaks, e.g. {leaks[:3]}"
    assert checked > 5_000
