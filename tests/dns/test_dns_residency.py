"""Residency over the wire: an EU client never gets a non-EU address, whatever the state.

Every non-EU region healthy while every EU region is down, or loaded past its spill quota,
or the client's location unknown; EU clients from the MaxMind test database (89.160.20.112,
SE) and GeoLite2 (2.2.2.2, FR), by ECS and as the resolver itself.
"""

from __future__ import annotations

import pytest
from dns_helpers import EU_ADDRESSES, a_addresses, ask, make_query

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState

SERVICES = ["chat.infer.example.com", "embed.infer.example.com", "sovereign.infer.example.com"]
NON_EU = {"127.0.1.1", "::ffff:127.0.1.1", "127.0.4.1"}
STATES = {
    "eu-down": {"us-east": RegionState(healthy=True), "ap-south": RegionState(healthy=True),
                "eu-west": RegionState(healthy=False), "eu-central": RegionState(healthy=False)},
    "eu-over-quota": {"us-east": RegionState(healthy=True, utilization=0.1),
                      "ap-south": RegionState(healthy=True, utilization=0.1),
                      "eu-west": RegionState(healthy=True, utilization=3.0),
                      "eu-central": RegionState(healthy=True, utilization=3.0)},
    "eu-draining": {"eu-west": RegionState(draining=True),
                    "eu-central": RegionState(draining=True)},
}


@pytest.fixture(params=["maxmind-test", "geolite2"])
def located(request, example_policy, maxmind_test_locator, geolite2):
    if request.param == "maxmind-test":
        return maxmind_test_locator, "89.160.20.112/32", "216.160.83.56/32"
    return geolite2, "2.2.2.0/24", "8.8.8.0/24"


@pytest.mark.parametrize("state", STATES, ids=list(STATES))
def test_eu_client_never_gets_a_non_eu_address(example_policy, located, state):
    locator, eu_subnet, us_subnet = located
    snapshots = StaticSnapshotSource()
    snapshots.update(STATES[state])
    app = DnsApp(example_policy, locator, snapshots)
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for service in SERVICES:
            for rdtype in ("A", "AAAA"):
                for tcp in (False, True):
                    response = ask(server.addresses[0],
                                   make_query(service, rdtype, ecs=eu_subnet), tcp=tcp)
                    assert a_addresses(response) <= EU_ADDRESSES, (service, state)
        # The same state does move a US client out of the EU (the state is in force).
        response = ask(server.addresses[0],
                       make_query("embed.infer.example.com", ecs=us_subnet))
        assert a_addresses(response) <= NON_EU


@pytest.mark.parametrize("subnet", ["0.0.0.0/0", "10.1.2.0/24", "192.0.2.0/24"],
                         ids=["opt-out", "private", "not-in-database"])
@pytest.mark.parametrize("state", STATES, ids=list(STATES))
def test_unknown_location_only_ever_gets_eu_or_nothing(example_policy, geolite2, subnet,
                                                       state):
    """A client that cannot be located may be an EU client: EU regions or nothing."""
    snapshots = StaticSnapshotSource()
    snapshots.update(STATES[state])
    app = DnsApp(example_policy, geolite2, snapshots)
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for service in SERVICES:
            response = ask(server.addresses[0], make_query(service, ecs=subnet))
            assert a_addresses(response) <= EU_ADDRESSES, (service, state)


def test_resolver_without_ecs_on_loopback_is_unlocated(address):
    """The loopback resolver is in no GeoIP database: unknown location, EU or nothing."""
    for service in SERVICES:
        response = ask(address, make_query(service, edns=False))
        assert a_addresses(response) <= EU_ADDRESSES
