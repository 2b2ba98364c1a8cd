# SPDX-License-Identifier: Apache-2.0
"""Cohort subnets from the bundled GeoLite2 City 2018: located where the cohort says, by
the same reader the DNS tier uses, and the same for the same seed."""

from __future__ import annotations

import ipaddress
import random

import pytest

from drills.cohorts import find_subnets, resolve_cohorts
from drills.errors import CohortError
from drills.model import Cohort

COUNTRIES = ["DE", "FR", "IE", "NL", "GB", "CH", "US", "LU"]


def test_subnets_are_whole_24s_located_in_their_country(geolite2) -> None:
    found = find_subnets(geolite2, COUNTRIES, 3, seed=1)
    for country, subnets in found.items():
        assert len(subnets) == 3
        assert len({s.network for s in subnets}) == 3
        for s in subnets:
            assert s.network.prefixlen == 24 and s.country == country
            rng = random.Random(0)
            for address in (s.network.network_address, s.client_address(rng),
                            s.network.broadcast_address):
                where = geolite2.locate(address)
                assert where.country == country, (country, address)
            assert s.network.network_address.is_global


def test_same_seed_same_subnets(geolite2) -> None:
    one = find_subnets(geolite2, ["DE", "US"], 2, seed=7)
    assert one == find_subnets(geolite2, ["DE", "US"], 2, seed=7)
    assert one != find_subnets(geolite2, ["DE", "US"], 2, seed=8)


def test_client_addresses_stay_inside_the_subnet(geolite2) -> None:
    (subnet,) = find_subnets(geolite2, ["FR"], 1, seed=1)["FR"]
    rng = random.Random(3)
    for _ in range(100):
        address = ipaddress.ip_address(subnet.client_address(rng))
        assert address in subnet.network
        assert address not in (subnet.network.network_address, subnet.network.broadcast_address)


def test_unknown_country_is_an_error(geolite2) -> None:
    with pytest.raises(CohortError, match="ZZ"):
        find_subnets(geolite2, ["ZZ"], 1, seed=1, max_probes=20_000)


def test_explicit_subnets_are_kept_and_located(geolite2) -> None:
    cohort = Cohort("fixed", 1.0, countries=("IE",), subnets=("81.2.69.0/24",),
                    subnets_per_country=1)
    (resolved,) = resolve_cohorts([cohort], geolite2, seed=1)
    assert str(resolved.subnets[0].network) == "81.2.69.0/24"
    assert resolved.subnets[0].country == "GB"
    assert resolved.subnets[1].country == "IE"
