"""Merged GeoIP networks: widened only over records that decide alike, and widened for real.

Exhaustive over the MaxMind test City database (every network it holds), sampled over
GeoLite2 City; the classes come from the example policy's classifier.
"""

from __future__ import annotations

import bisect
import ipaddress
import random

import maxminddb
import pytest

from director.engine.location_class import location_classifier
from director.geo import GeoLocator, RecordFields, record_fields
from director.geo_merge import MergedNetworks

NOWHERE = RecordFields(None, None, None, None)


def fields_at(geo: GeoLocator, address) -> RecordFields:
    location = geo.locate(address)
    return RecordFields(location.country, location.continent, location.latitude,
                        location.longitude)


def test_every_merged_network_of_the_test_database_holds_one_class(example_policy,
                                                                    maxmind_test_city):
    classify = location_classifier(example_policy)
    geo = GeoLocator(str(maxmind_test_city))
    merged = MergedNetworks(geo, classify)
    with maxminddb.open_database(str(maxmind_test_city)) as reader:
        held = sorted(((network, record) for network, record in reader
                       if network.version == 4 or not network.subnet_of(
                           ipaddress.ip_network("::/96"))),
                      key=lambda item: (item[0].version, int(item[0].network_address)))
    starts = [(n.version, int(n.network_address)) for n, _ in held]
    widened = 0
    for network, record in held:
        target = classify(record_fields(record))
        wide = merged.widest(network.network_address)
        assert network.subnet_of(wide) or wide.subnet_of(network), (network, wide)
        widened += wide.prefixlen < network.prefixlen
        # every network of the database inside the merged one is of the same class ...
        low = bisect.bisect_left(starts, (wide.version, int(wide.network_address)))
        high = bisect.bisect_right(starts, (wide.version, int(wide.broadcast_address)))
        covered = 0
        for inner, inner_record in held[low:high]:
            if inner.subnet_of(wide):
                assert classify(record_fields(inner_record)) == target, (network, wide, inner)
                covered += inner.num_addresses
        # ... and so is the space the database holds nothing for
        if covered < wide.num_addresses:
            assert classify(NOWHERE) == target, (network, wide)
    assert widened > 0


def test_geolite2_merged_networks_decide_alike_at_sampled_addresses(example_policy, geolite2):
    classify = location_classifier(example_policy)
    merged = MergedNetworks(geolite2, classify)
    rng = random.Random(7)
    wider = 0
    for _ in range(300):
        address = ipaddress.IPv4Address(rng.getrandbits(32))
        wide = merged.widest(address)
        block = geolite2.locate(address).network
        assert address in wide and wide.prefixlen <= block.prefixlen
        wider += wide.prefixlen < block.prefixlen
        target = classify(fields_at(geolite2, address))
        first = int(wide.network_address)
        for probe in [first, first + wide.num_addresses - 1] + [
                first + rng.randrange(wide.num_addresses) for _ in range(16)]:
            assert classify(fields_at(geolite2, ipaddress.IPv4Address(probe))) == target, (
                address, wide, ipaddress.IPv4Address(probe))
    assert wider > 100


@pytest.mark.parametrize(("address", "prefix"), [
    ("81.2.69.160", 18),  # GB; gdnsd merges this one to /18 too
    ("8.8.8.8", 13),  # US; gdnsd: /13
    ("2.2.2.2", 23),  # FR: nearer eu-west or eu-central changes from block to block
])
def test_known_merges(example_policy, geolite2, address, prefix):
    merged = MergedNetworks(geolite2, location_classifier(example_policy), budget=10**6)
    assert merged.widen(ipaddress.ip_address(address)) == (
        ipaddress.ip_network(address).supernet(new_prefix=prefix), True)


def test_a_widening_cut_short_goes_on_where_it_stopped(example_policy, geolite2):
    merged = MergedNetworks(geolite2, location_classifier(example_policy), budget=50)
    address = ipaddress.ip_address("8.8.8.8")
    prefixes = []
    for _ in range(200):
        network, final = merged.widen(address)
        prefixes.append(network.prefixlen)
        if final:
            break
    assert final and prefixes[-1] == 13
    assert prefixes == sorted(prefixes, reverse=True) and prefixes[0] > 13


def test_a_small_budget_stops_early_but_never_widens_past_the_class(example_policy, geolite2):
    classify = location_classifier(example_policy)
    tight = MergedNetworks(geolite2, classify, budget=3)
    full = MergedNetworks(geolite2, classify, budget=10**6)
    address = ipaddress.ip_address("8.8.8.8")
    narrow = tight.widest(address)
    assert full.widest(address).prefixlen < narrow.prefixlen <= 19
    assert narrow.subnet_of(full.widest(address))


def test_classes_follow_residency_rules_and_geo_ranking(example_policy):
    classify = location_classifier(example_policy)
    paris = classify(RecordFields("FR", "EU", 48.86, 2.35))
    assert classify(RecordFields("FR", "EU", 48.86, 2.35)) == paris
    assert classify(RecordFields("FR", "EU", 48.80, 2.30)) == paris  # same rules, same order
    assert classify(RecordFields("US", "NA", 48.86, 2.35)) != paris  # rules differ
    assert classify(RecordFields("FR", "EU", None, None)) != paris  # no coordinates
    assert classify(RecordFields("FR", "EU", 1.35, 103.8)) != paris  # ranking differs
    assert classify(NOWHERE) == classify(RecordFields(None, None, 40.0, -70.0))
