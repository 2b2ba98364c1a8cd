"""The IPv4 space merged ahead of time (``director.geo_map``): a partition of the space into
networks of one class each, the same networks an unbudgeted widening finds, and answers
through it byte for byte those of the full path."""

from __future__ import annotations

import dataclasses
import gc
import ipaddress
import random
import threading

import maxminddb
import pytest
from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.cli import policy_swapper
from director.dns.map_build import MapBuild, MapBuildFailed
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState
from director.engine.location_class import location_classifier
from director.geo import GeoLocator, RecordFields, record_fields
from director.geo_map import NetworkMap
from director.geo_merge import CompileCancelled, MergedNetworks

UNBOUNDED = 10**9


def assert_partition(network_map: NetworkMap) -> None:
    expected = 0
    for index in range(len(network_map)):
        network = network_map.network(index)
        assert int(network.network_address) == expected, network
        expected += network.num_addresses
    assert expected == 1 << 32


def test_the_test_database_compiles_to_the_widened_networks(example_policy,
                                                            maxmind_test_city) -> None:
    classify = location_classifier(example_policy)
    geo = GeoLocator(str(maxmind_test_city))
    network_map = MergedNetworks(geo, classify).compile_ipv4()
    assert_partition(network_map)
    widen = MergedNetworks(geo, classify, budget=UNBOUNDED)
    with maxminddb.open_database(str(maxmind_test_city)) as reader:
        held = [(n, r) for n, r in reader if n.version == 4]
    assert held
    for network, record in held:
        for address in (network.network_address, network.broadcast_address):
            index = network_map.find(int(address))
            assert network_map.class_of(index) == classify(record_fields(record)), network
            assert network_map.network(index) == widen.widest(address), network


def test_geolite2_compiles_to_the_widened_networks(example_policy, geolite2,
                                                    geolite2_map) -> None:
    assert_partition(geolite2_map)
    classify = location_classifier(example_policy)
    widen = MergedNetworks(geolite2, classify, budget=UNBOUNDED)
    rng = random.Random(2)
    for _ in range(300):
        address = ipaddress.IPv4Address(rng.randrange(1 << 24, 224 << 24))
        index = geolite2_map.find(int(address))
        fields = geolite2.fields(address)
        assert geolite2_map.network(index) == widen.widest(address), address
        if fields is not None:
            assert geolite2_map.class_of(index) == classify(fields), address


@pytest.mark.parametrize("state", ["calm", "us-hot", "eu-west-down"])
def test_answers_through_the_map_equal_the_full_path(example_policy, geolite2, geolite2_map,
                                                     state) -> None:
    regions = {"calm": {}, "us-hot": {"us-east": RegionState(healthy=True, utilization=1.1)},
               "eu-west-down": {"eu-west": RegionState(healthy=False)}}[state]
    mapped_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    mapped_state.update(regions)
    full_state.update(regions)
    mapped = DnsApp(example_policy, geolite2, mapped_state)
    mapped.locator.network_map = geolite2_map
    full = DnsApp(example_policy, geolite2, full_state, merge_budget=UNBOUNDED)
    rng = random.Random(4)
    for _ in range(400):
        address = ipaddress.IPv4Address(rng.randrange(1 << 24, 224 << 24))
        subnet = str(ipaddress.ip_network((address, rng.choice([24, 24, 20, 32])), strict=False))
        for name in ("chat.infer.example.com", "embed.infer.example.com",
                     "sovereign.infer.example.com"):
            wire = make_query(name, ecs=subnet, qid=rng.randrange(65536)).to_wire()
            got = mapped.respond(wire, "127.0.0.1")
            full.handler.decisions.clear()
            assert got == full.respond_full(wire, "127.0.0.1"), (state, name, subnet)


def test_a_server_builds_its_map_in_the_background(example_policy, maxmind_test_city) -> None:
    geo = GeoLocator(str(maxmind_test_city))
    app = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True)
    assert app.map_ready is not None and app.map_ready.wait(30)
    built = app.locator.network_map
    direct = MergedNetworks(geo, location_classifier(example_policy)).compile_ipv4()
    assert built is not None and len(built) == len(direct) > 1
    assert (built.starts, built.prefixes, built.class_index) == (
        direct.starts, direct.prefixes, direct.class_index)
    assert built.classes == direct.classes and built.fields == direct.fields


def test_a_policy_change_keeps_the_map_when_classes_do_not_change(example_policy,
                                                                  maxmind_test_city) -> None:
    geo = GeoLocator(str(maxmind_test_city))
    app = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True)
    assert app.map_ready is not None and app.map_ready.wait(30)
    built = app.locator.network_map
    ttl_only = dataclasses.replace(example_policy, services=tuple(
        dataclasses.replace(s, ttl=s.ttl + 1) for s in example_policy.services))
    app.set_policy(ttl_only)
    assert app.locator.network_map is built  # no rebuild for a TTL change
    moved = dataclasses.replace(example_policy, regions=tuple(
        dataclasses.replace(r, latitude=-r.latitude) for r in example_policy.regions))
    app.set_policy(moved)
    assert app.locator.network_map is None  # other classes: rebuilt in the background
    assert app.map_ready.wait(30) and app.locator.network_map is not built
    assert app.locator.network_map is not None


def test_a_policy_prepared_ahead_answers_from_its_map_from_the_swap_on(example_policy,
                                                                       maxmind_test_city,
                                                                       tmp_path) -> None:
    """A policy edit that changes the location classes: ``prepare_maps`` builds the new
    classes' maps while the old policy answers, the swap takes them at once (no answer on
    the slow path), and they are stored: the same edit on a restarted server loads them."""
    geo = GeoLocator(str(maxmind_test_city))
    app = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True,
                 map_cache=tmp_path)
    assert app.map_ready is not None and app.map_ready.wait(30)
    old_map = app.locator.network_map
    moved = dataclasses.replace(example_policy, regions=tuple(
        dataclasses.replace(r, latitude=-r.latitude) for r in example_policy.regions))
    app.prepare_maps(moved)
    assert app.policy is example_policy and app.locator.network_map is old_map
    app.set_policy(moved)
    assert app.locator.network_map is not None and app.locator.network_map is not old_map
    assert app.map_ready.is_set()
    again = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True,
                   map_cache=tmp_path)
    again.prepare_maps(moved)  # from the cache
    again.set_policy(moved)
    assert again.locator.network_map is not None
    assert list(again.locator.network_map.starts) == list(app.locator.network_map.starts)


async def test_a_policy_overtaken_while_its_maps_are_built_is_never_served(
        example_policy, maxmind_test_city) -> None:
    geo = GeoLocator(str(maxmind_test_city))
    app = DnsApp(example_policy, geo, StaticSnapshotSource(), precompile=True)
    swap = policy_swapper(app, StaticSnapshotSource(), None)
    first = dataclasses.replace(example_policy, regions=tuple(
        dataclasses.replace(r, latitude=-r.latitude) for r in example_policy.regions))
    second = dataclasses.replace(example_policy, services=tuple(
        dataclasses.replace(s, ttl=s.ttl + 1) for s in example_policy.services))
    served = []
    original = app.set_policy

    def recorded(policy):
        served.append(policy)
        original(policy)

    app.set_policy = recorded
    # the first changes the classes (a build), the second only TTLs: it is ready first
    overtaken, newest = swap(first), swap(second)
    await overtaken
    await newest
    assert served == [second] and app.policy is second


def test_a_build_for_a_replaced_policy_is_cancelled(example_policy, geolite2) -> None:
    cancel = threading.Event()
    cancel.set()
    merged = MergedNetworks(geolite2, location_classifier(example_policy))
    with pytest.raises(CompileCancelled):  # raised on the way, never after the end
        merged.compile_ipv4(cancel)


def test_geolite2_ipv6_compiles_to_the_widened_networks(example_policy, geolite2,
                                                         geolite2_map6: NetworkMap) -> None:
    """The IPv6 map partitions the first 64 bits of the space; where it has a class its
    network is the unbudgeted widening's; the IPv4 space inside the tree falls back."""
    expected = 0
    for index in range(len(geolite2_map6)):
        assert geolite2_map6.starts[index] == expected
        expected += 1 << (64 - geolite2_map6.prefixes[index])
    assert expected == 1 << 64
    classify = location_classifier(example_policy)
    widen = MergedNetworks(geolite2, classify, budget=UNBOUNDED)
    rng = random.Random(8)
    located = 0
    for _ in range(400):
        address = ipaddress.IPv6Address(rng.choice([0x2001, 0x2400, 0x2600, 0x2a00, 0x2800,
                                                    0x2c00, 0x3000]) << 112
                                        | rng.randrange(0, 1 << 112))
        index = geolite2_map6.find(int(address) >> 64)
        if geolite2_map6.fallback(index):
            assert widen.widest(address).prefixlen > 64, address
            continue
        located += 1
        assert geolite2_map6.network(index) == widen.widest(address), address
        fields = geolite2.fields(address)
        if fields is not None:
            assert geolite2_map6.class_of(index) == classify(fields), address
    assert located > 350
    for embedded in ("::ffff:81.2.69.1", "::81.2.69.1", "2002:5102:4501::1"):
        value = int(ipaddress.IPv6Address(embedded)) >> 64
        assert geolite2_map6.fallback(geolite2_map6.find(value)), embedded


def test_ipv6_aliases_of_ipv4_are_located_through_the_ipv4_map(
        example_policy, geolite2, geolite2_map: NetworkMap, geolite2_map6: NetworkMap,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """6to4 and Teredo subnets (the database's IPv4 aliases) answer as the full path does,
    without reading the database: its pages are what grew the server on IPv6 streams."""
    assert sorted(geolite2_map6.aliases) == [(0x2001 << 48, 32), (0x2002 << 48, 16)]
    mapped = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    mapped.locator.network_map = geolite2_map
    mapped.locator.network_map6 = geolite2_map6
    full = DnsApp(example_policy, geolite2, StaticSnapshotSource(), merge_budget=UNBOUNDED)
    rng = random.Random(11)
    queries = []
    for _ in range(150):
        ipv4 = rng.randrange(1 << 24, 224 << 24)
        for top, depth in ((0x2002, 16), (0x2001_0000, 32)):
            value = top << (128 - depth) | ipv4 << (96 - depth) | rng.randrange(1 << 40)
            prefix = rng.choice([56, 56, 48, 64])
            subnet = str(ipaddress.ip_network((value, prefix), strict=False))
            queries.append((subnet, make_query("chat.infer.example.com", ecs=subnet,
                                               qid=rng.randrange(65536)).to_wire()))
    expected = {subnet: full.respond_full(wire, "127.0.0.1") for subnet, wire in queries}

    def no_database(*_: object) -> None:
        raise AssertionError("the database was read")

    monkeypatch.setattr(mapped.locator.geo, "locate", no_database)
    monkeypatch.setattr(mapped.locator.merged, "widen", no_database)
    for subnet, wire in queries:
        assert mapped.respond(wire, "127.0.0.1") == expected[subnet], subnet
    assert geolite2_map6.ipv4_of(ipaddress.IPv6Address("2002:5102:4501::1")) == (
        ipaddress.IPv4Address("81.2.69.1"), 16)
    assert geolite2_map6.ipv4_of(ipaddress.IPv6Address("2003::1")) is None


@pytest.mark.parametrize("compile_map", [MergedNetworks.compile_ipv4,
                                         MergedNetworks.compile_ipv6])
def test_a_map_build_leaves_its_records_to_reference_counting(example_policy,
                                                              maxmind_test_city,
                                                              compile_map) -> None:
    """The walk's memos are freed when the build ends, not left in a reference cycle for
    the next full collection (on GeoLite2 a 200 ms pause of the server)."""
    merged = MergedNetworks(GeoLocator(str(maxmind_test_city)),
                            location_classifier(example_policy))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        network_map = compile_map(merged)
        assert network_map is not None and len(network_map)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, RecordFields)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_a_map_build_that_fails_says_so(example_policy, tmp_path) -> None:
    """The child ends in an error (here: no database at its path): the build raises
    ``MapBuildFailed``, and nothing half-written is loaded."""
    build = MapBuild(str(tmp_path / "missing.mmdb"), example_policy, 10_000, tmp_path,
                     "digest")
    with pytest.raises(MapBuildFailed, match="ended with 1"):
        build.run(60)
    assert not list(tmp_path.glob("*.pickle"))
