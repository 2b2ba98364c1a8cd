"""The client locator's memos: a new /24 inside a network already widened costs no
database lookup and no widening, and gets the location a fresh lookup would classify alike,
with the scope of a widening that was not cut short."""

from __future__ import annotations

import ipaddress
import random

from director.dns.locate import ClientLocator
from director.engine.location_class import location_classifier
from director.geo import GeoLocator
from director.geo_merge import MergedNetworks


class CountingGeo(GeoLocator):
    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def locate(self, address):  # type: ignore[no-untyped-def]
        self.lookups += 1
        return super().locate(address)


def test_addresses_inside_a_widened_network_skip_the_database(example_policy) -> None:
    geo = CountingGeo()
    classify = location_classifier(example_policy)
    merged = MergedNetworks(geo, classify)
    locator = ClientLocator(geo, merged)
    fresh = ClientLocator(GeoLocator(), MergedNetworks(GeoLocator(), classify))
    rng = random.Random(5)
    checked = 0
    for _ in range(300):
        first = ipaddress.IPv4Address(rng.randrange(1 << 24, 224 << 24))
        located = locator.locate(first)
        network = located.network
        if network.prefixlen > 20 or locator.widened(first) is None:  # narrow, or cut short
            continue
        for _ in range(5):  # other /24s of the same widened network
            inside = network.network_address + rng.randrange(network.num_addresses)
            before = geo.lookups
            memoised = locator.locate(inside)
            expected = fresh.locate(inside)
            assert geo.lookups == before, (first, inside)
            # a fresh widening, with an empty memo, may be cut short by its budget
            assert memoised.network == network and expected.network.subnet_of(network)
            assert merged.class_of(memoised) == merged.class_of(expected)
            checked += 1
    assert checked >= 100
