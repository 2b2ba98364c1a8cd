"""ECS (RFC 7871) as section 7.2.1 asks of an authoritative server: the option echoed with
FAMILY, SOURCE PREFIX-LENGTH and ADDRESS as sent and the scope the answer depends on; scope 0
for answers that do not depend on the client; opt-out (source 0); FORMERR when malformed."""

from __future__ import annotations

import dataclasses
import ipaddress
import random

import dns.edns
import dns.message
import dns.rcode
import pytest
from dns_helpers import a_addresses, ask, ask_wire, ecs_option, make_query

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState

MERGE_CASES = [  # subnet, database block prefix, fully merged prefix, answer
    ("2.2.2.0/24", 23, 23, "127.0.3.1"),  # FR: its neighbours rank eu-west/eu-central apart
    ("8.8.8.0/24", 19, 13, "127.0.1.1"),  # US: block 8.8.0.0/19; gdnsd merges it to /13 too
    ("81.2.69.0/24", 23, 18, "127.0.2.1"),  # GB: block 81.2.68.0/23; gdnsd: /18
    ("2.2.0.0/16", 24, 24, "127.0.2.1"),  # /16 source: the block of 2.2.0.0 (/24, Brittany)
    ("8.8.8.8/32", 19, 13, "127.0.1.1"),
]
MERGE_IDS = ["fr-24", "us-24", "gb-24", "fr-16", "us-32"]


@pytest.mark.parametrize(("subnet", "block", "merged", "answer"), MERGE_CASES, ids=MERGE_IDS)
def test_scope_is_a_merged_network_the_decision_used(address, subnet, block, merged, answer):
    """The first answer's scope lies between the database block and the full merge (one
    widening has a work budget); the option echoes family, source and address as sent."""
    response = ask(address, make_query("chat.infer.example.com", ecs=subnet))
    option = ecs_option(response)
    sent = dns.edns.ECSOption.from_text(subnet)
    assert option is not None
    assert (option.family, option.srclen, option.addrdata) == (sent.family, sent.srclen,
                                                                sent.addrdata)
    assert merged <= option.scopelen <= block
    assert a_addresses(response) == {answer}


@pytest.mark.parametrize(("subnet", "block", "merged", "answer"), MERGE_CASES, ids=MERGE_IDS)
def test_scope_widens_to_the_full_merge_over_snapshots(example_policy, geolite2, subnet, block,
                                                        merged, answer):
    """Each new snapshot (the refresher swaps one in whenever state changes) recomputes the
    answer, and the widening carries on where its budget stopped, up to gdnsd's merge."""
    snapshots = StaticSnapshotSource()
    app = DnsApp(example_policy, geolite2, snapshots)
    scopes = []
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for _ in range(40):
            response = ask(server.addresses[0], make_query("chat.infer.example.com", ecs=subnet))
            scopes.append(ecs_option(response).scopelen)
            assert a_addresses(response) == {answer}
            if scopes[-1] == merged:
                break
            snapshots.update({})
    assert scopes[-1] == merged, scopes
    assert scopes == sorted(scopes, reverse=True)  # never narrower again


SCOPE_STATES = {
    "healthy": {},
    "eu-west-down": {"eu-west": RegionState(healthy=False)},
    "us-east-and-eu-central-down": {"us-east": RegionState(healthy=False),
                                    "eu-central": RegionState(healthy=False)},
}


@pytest.mark.parametrize("state", SCOPE_STATES, ids=list(SCOPE_STATES))
def test_every_subnet_inside_an_answered_scope_gets_the_same_answer(example_policy, geolite2,
                                                                    state):
    """A resolver caches an answer for the whole scope: any /24 in it, asked afresh, must get
    the same addresses, in any health state (the scope comes from the merged network)."""
    snapshots = StaticSnapshotSource()
    snapshots.update(SCOPE_STATES[state])
    app = DnsApp(example_policy, geolite2, snapshots)
    rng = random.Random(11)
    subnets = ["81.2.69.0/24", "8.8.8.0/24", "1.0.16.0/24", "2.2.2.0/24"] + [
        f"{ipaddress.IPv4Address(rng.getrandbits(24) << 8)}/24" for _ in range(40)]
    widened = 0
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for service in ("chat.infer.example.com", "sovereign.infer.example.com"):
            for subnet in subnets:
                response = ask(server.addresses[0], make_query(service, ecs=subnet))
                scope = ecs_option(response).scopelen
                widened += 0 < scope < 24
                if scope == 0 or scope >= 24:
                    continue
                wide = ipaddress.ip_network(subnet).supernet(new_prefix=scope)
                for _ in range(4):
                    inner = wide.network_address + (rng.randrange(wide.num_addresses) & ~0xFF)
                    again = ask(server.addresses[0], make_query(service, ecs=f"{inner}/24"))
                    assert a_addresses(again) == a_addresses(response), (service, subnet,
                                                                         scope, inner)
    assert widened > 10


def test_ipv6_subnet_is_echoed(address):
    response = ask(address, make_query("chat.infer.example.com", "AAAA",
                                       ecs="2001:db8:1234::/48"))
    option = ecs_option(response)
    assert option is not None and option.family == 2 and option.srclen == 48
    assert option.address == "2001:db8:1234::"


@pytest.mark.parametrize(("name", "rdtype"), [
    ("infer.example.com", "SOA"), ("infer.example.com", "NS"), ("nope.infer.example.com", "A"),
    ("chat.infer.example.com", "TXT"), ("ns1.infer.example.com", "A"), ("example.org", "A"),
])
def test_location_independent_answers_carry_scope_0(address, name, rdtype):
    response = ask(address, make_query(name, rdtype, ecs="2.2.2.0/24"))
    option = ecs_option(response)
    assert option is not None and option.scopelen == 0 and option.srclen == 24


def test_a_service_that_ignores_location_answers_scope_0(example_policy, geolite2):
    """No residency rule and fixed-priority steering: the answer is everybody's, scope 0."""
    services = tuple(
        dataclasses.replace(s, residency=(), steer=("priority",),
                            priority=("eu-west", "eu-central", "ap-south", "us-east"))
        if s.name == "sovereign.infer.example.com" else s
        for s in example_policy.services)
    policy = dataclasses.replace(example_policy, services=services)
    app = DnsApp(policy, geolite2, StaticSnapshotSource())
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for subnet in ("2.2.2.0/24", "8.8.8.0/24"):
            response = ask(server.addresses[0],
                           make_query("sovereign.infer.example.com", ecs=subnet))
            assert ecs_option(response).scopelen == 0
            assert a_addresses(response) == {"127.0.2.1"}


def test_no_ecs_in_query_means_no_ecs_in_response(address):
    response = ask(address, make_query("chat.infer.example.com"))
    assert ecs_option(response) is None


def test_opt_out_is_not_located_and_scope_0(address):
    """Source prefix 0: the client asked not to be located (section 7.1.2); the answer is
    the policy's unknown-location one, the same for everybody, so scope 0."""
    for name, expected in (("chat.infer.example.com", {"127.0.2.1"}),
                           ("embed.infer.example.com", {"127.0.3.1"}),
                           ("sovereign.infer.example.com", set())):
        response = ask(address, make_query(name, ecs="0.0.0.0/0"))
        option = ecs_option(response)
        assert option is not None and option.srclen == 0 and option.scopelen == 0
        assert a_addresses(response) == expected


def _ecs_query(*values: bytes) -> bytes:
    query = make_query("chat.infer.example.com")
    query.use_edns(0, 0, 1232, options=[dns.edns.GenericOption(8, v) for v in values])
    return query.to_wire()


MALFORMED = {
    "unknown-family": b"\x00\x03\x18\x00\x01\x02\x03",
    "source-over-32": b"\x00\x01\x21\x00\x01\x02\x03\x04\x05",
    "source-over-128": b"\x00\x02\x81\x00" + b"\x20" * 17,
    "address-too-long": b"\x00\x01\x18\x00\x01\x02\x03\x04",
    "address-too-short": b"\x00\x01\x18\x00\x01\x02",
    "host-bits-set": b"\x00\x01\x17\x00\x01\x02\x03",
    "scope-not-zero": b"\x00\x01\x18\x10\x01\x02\x03",
    "shorter-than-header": b"\x00\x01\x18",
    "empty": b"",
}


@pytest.mark.parametrize("value", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_ecs_gets_formerr(address, value):
    reply = ask_wire(address, _ecs_query(value))
    assert reply is not None
    response = dns.message.from_wire(reply)
    assert response.rcode() == dns.rcode.FORMERR
    assert not response.answer
    assert ecs_option(response) is None


def test_two_ecs_options_get_formerr(address):
    good = b"\x00\x01\x18\x00\x02\x02\x02"
    reply = ask_wire(address, _ecs_query(good, good))
    assert reply is not None
    assert dns.message.from_wire(reply).rcode() == dns.rcode.FORMERR
