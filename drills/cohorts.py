# SPDX-License-Identifier: Apache-2.0
"""Client cohorts as real subnets: /24 networks the GeoIP database places in a country.

A cohort names countries (``[DE, FR, IE]``) or subnets. For each country, ``find_subnets``
probes IPv4 /24 networks in a seeded pseudo-random order over the public unicast space and
keeps those whose whole /24 lies in one database network located in that country (the
record's ``country``, else ``registered_country``, as ``director.geo`` reads it), so the
ECS prefix and every client address in it locate the same way for the DNS tier and for the
balancers' residency re-check. The same seed and database always give the same subnets.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable
from dataclasses import dataclass

import maxminddb

from director.geo import GeoLocator
from drills.errors import CohortError
from drills.model import Cohort

MAX_PROBES = 4_000_000
_SKIP = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/3",
))


@dataclass(frozen=True)
class ClientSubnet:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    country: str | None
    continent: str | None

    def client_address(self, rng: random.Random) -> str:
        """A host address inside the subnet (never the network or broadcast address)."""
        hosts = self.network.num_addresses
        offset = 1 + rng.randrange(max(1, min(hosts - 2, 250)))
        return str(self.network.network_address + offset)


@dataclass(frozen=True)
class ResolvedCohort:
    cohort: Cohort
    subnets: tuple[ClientSubnet, ...]

    @property
    def name(self) -> str:
        return self.cohort.name


def _country(record: object) -> str | None:
    if not isinstance(record, dict):
        return None
    return ((record.get("country") or record.get("registered_country") or {})
            .get("iso_code"))


def find_subnets(locator: GeoLocator, countries: Iterable[str], per_country: int,
                 seed: int, max_probes: int = MAX_PROBES) -> dict[str, list[ClientSubnet]]:
    """``per_country`` /24 subnets located in each country, found by seeded probing."""
    wanted: dict[str, list[ClientSubnet]] = {c: [] for c in countries}
    if not wanted:
        return {}
    rng = random.Random(f"cohort-subnets:{seed}:{','.join(sorted(wanted))}")
    seen: set[int] = set()
    with maxminddb.open_database(locator.path) as reader:
        for _ in range(max_probes):
            if all(len(v) >= per_country for v in wanted.values()):
                break
            base = rng.getrandbits(24) << 8
            if base in seen:
                continue
            seen.add(base)
            address = ipaddress.IPv4Address(base)
            if any(address in n for n in _SKIP):
                continue
            record, prefix = reader.get_with_prefix_len(address)
            country = _country(record)
            if country not in wanted or prefix > 24 or len(wanted[country]) >= per_country:
                continue
            located = locator.locate(address)
            if located.country != country or located.network.prefixlen > 24:
                continue
            network = ipaddress.ip_network((address, 24))
            wanted[country].append(ClientSubnet(network, country, located.continent))
    missing = [c for c, v in wanted.items() if len(v) < per_country]
    if missing:
        raise CohortError(f"found too few /24 subnets for {', '.join(missing)} in "
                          f"{locator.path} after {max_probes} probes (is it a country code "
                          f"the database knows?)")
    return wanted


def resolve_cohorts(cohorts: Iterable[Cohort], locator: GeoLocator,
                    seed: int) -> tuple[ResolvedCohort, ...]:
    """Subnets for every cohort: its explicit ones, plus ``subnets_per_country`` each."""
    cohorts = tuple(cohorts)
    out = []
    for cohort in cohorts:
        subnets = []
        for text in cohort.subnets:
            network = ipaddress.ip_network(text)
            where = locator.locate(network.network_address)
            subnets.append(ClientSubnet(network, where.country, where.continent))
        found = find_subnets(locator, cohort.countries, cohort.subnets_per_country,
                             seed) if cohort.countries else {}
        for country in cohort.countries:
            subnets.extend(found[country])
        out.append(ResolvedCohort(cohort, tuple(subnets)))
    return tuple(out)
