"""The fast path answers byte for byte what the full dnspython path answers.

A corpus of queries (every protocol case, names x types x ECS shapes x EDNS flags x payload
sizes x transports x resolver addresses, with mixed-case and re-ID'd variants) under several
snapshots: the cached answer (first fill, memo hit, template hit) must equal the full path's
answer computed from scratch (decision memo cleared) for the same bytes. It runs over the
example policy and over a variant of it whose services, together, steer by every
registered method (the memo key and the ECS scope derive from what each method declares
it reads, so a method missing here could leave the cache silently wrong).
"""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path

import dns.edns
import dns.message
import dns.name
import dns.rcode
import dns.rrset
import pytest
from dns_helpers import make_query
from dns_protocol_cases import CASES

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.engine import RegionState
from director.engine.registry import register_builtin_plugins
from policies import Policy, load_policy

NAMES = ["chat.infer.example.com", "embed.infer.example.com", "sovereign.infer.example.com",
         "infer.example.com", "ns1.infer.example.com", "nope.infer.example.com",
         "_explain.chat.infer.example.com", "example.org"]
TYPES = ["A", "AAAA", "SOA", "TXT", "ANY"]
ECS = [None, "2.2.2.0/24", "2.2.3.0/24", "8.8.8.0/24", "8.8.9.7/32", "81.2.69.0/24",
       "0.0.0.0/0", "10.0.0.0/8", "2001:db8::/56", "89.160.20.0/22"]
HOSTS = ["127.0.0.1", "8.8.8.8", "2.2.2.2", "::1"]
SNAPSHOTS = {
    "calm": {},
    "us-hot": {"us-east": RegionState(healthy=True, utilization=1.02)},
    "eu-west-down-degraded": {"eu-west": RegionState(healthy=False),
                              "eu-central": RegionState(degraded=True)},
}


def _variants(rng: random.Random, query: dns.message.Message) -> list[bytes]:
    wire = query.to_wire()
    out = [wire, _with_id(wire, rng.randrange(65536))]
    name = query.question[0].name.to_text() if query.question else ""
    if name:
        mixed = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
        other = query.__class__(id=rng.randrange(65536))
        other.flags = query.flags
        first = query.question[0]
        other.question = [dns.rrset.RRset(dns.name.from_text(mixed), first.rdclass,
                                          first.rdtype)]
        if query.edns >= 0:
            other.use_edns(query.edns, query.ednsflags, query.payload, options=query.options)
        out.append(other.to_wire())
    return out


def _with_id(wire: bytes, qid: int) -> bytes:
    return qid.to_bytes(2, "big") + wire[2:]


def _corpus(rng: random.Random) -> list[dns.message.Message]:
    queries = [case.build() for case in CASES]
    for name, rdtype, ecs in itertools.product(NAMES, TYPES, ECS):
        queries.append(make_query(name, rdtype, ecs=ecs, qid=rng.randrange(65536)))
    for name, ecs in itertools.product(NAMES[:3], ECS):
        queries.append(make_query(name, ecs=ecs, payload=rng.choice([0, 512, 1232, 4096])))
        queries.append(make_query(name, ecs=ecs, want_dnssec=True, flags=0x0010))
        queries.append(make_query(name, edns=False, flags=0))
        cookie = make_query(name, ecs=ecs)
        cookie.use_edns(0, 0, 1232, options=[*cookie.options,
                                             dns.edns.GenericOption(10, b"12345678")])
        queries.append(cookie)
    return queries


@pytest.fixture(scope="module")
def every_method_policy(example_policy_path: Path, tmp_path_factory) -> Policy:
    """The example policy with ``embed`` steered ``weighted priority``: its services then
    use latency, geo, weighted and priority."""
    folder = tmp_path_factory.mktemp("every-method") / "examples"
    shutil.copytree(example_policy_path.parent, folder)
    policy_file = folder / example_policy_path.name
    text = policy_file.read_text()
    assert text.count("    steer priority\n") == 1
    policy_file.write_text(text.replace("    steer priority\n", "    steer weighted priority\n"))
    return load_policy(str(policy_file))


def test_the_variant_steers_by_every_registered_method(every_method_policy: Policy) -> None:
    used = {method for service in every_method_policy.services for method in service.steer}
    assert used == set(register_builtin_plugins())


@pytest.mark.parametrize("policy_name", ["example", "every-method"])
@pytest.mark.parametrize("state", SNAPSHOTS, ids=list(SNAPSHOTS))
def test_fast_path_is_byte_identical_to_full_path(request, policy_name, geolite2, state):
    example_policy = request.getfixturevalue(
        "example_policy" if policy_name == "example" else "every_method_policy")
    rng = random.Random(7)
    fast_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    fast_state.update(SNAPSHOTS[state])
    full_state.update(SNAPSHOTS[state])
    # Unbounded GeoIP widening: with a budget, a later answer may rightly carry a wider
    # scope than an earlier one (the widening goes on), which is not what this compares.
    fast = DnsApp(example_policy, geolite2, fast_state, merge_budget=10**7)
    full = DnsApp(example_policy, geolite2, full_state, merge_budget=10**7)
    checked = 0
    for query in _corpus(rng):
        for wire in _variants(rng, query):
            host, tcp = rng.choice(HOSTS), rng.random() < 0.3
            for _ in range(2):  # fill, then hit
                got = fast.respond(wire, host, tcp)
                full.handler.decisions.clear()
                want = full.respond_full(wire, host, tcp)
                assert got == want, (dns.message.from_wire(wire).to_text(), host, tcp)
                checked += 1
    assert checked > 2000
    snap = fast.stats.snapshot()
    assert snap["cache_misses"] > 100
    assert sum(snap["responses"].values()) - snap["cache_misses"] - snap["uncached"] > 1000


def test_snapshot_swap_is_seen_by_the_cache(example_policy, geolite2):
    snapshots = StaticSnapshotSource()
    app = DnsApp(example_policy, geolite2, snapshots)
    wire = make_query("embed.infer.example.com", ecs="8.8.8.0/24").to_wire()
    assert b"\x7f\x00\x01\x01" in app.respond(wire, "127.0.0.1")  # us-east
    snapshots.update({"us-east": RegionState(healthy=False)})
    assert b"\x7f\x00\x02\x01" in app.respond(wire, "127.0.0.1")  # eu-west


def test_policy_swap_replaces_answers_and_caches(example_policy, geolite2):
    import dataclasses

    app = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    wire = make_query("embed.infer.example.com", ecs="8.8.8.0/24").to_wire()
    assert b"\x7f\x00\x01\x01" in app.respond(wire, "127.0.0.1")
    regions = tuple(dataclasses.replace(r, endpoints_v4=("127.0.9.9",))
                    if r.name == "us-east" else r for r in example_policy.regions)
    app.set_policy(dataclasses.replace(example_policy, regions=regions))
    assert b"\x7f\x00\x09\x09" in app.respond(wire, "127.0.0.1")


class BrokenSnapshots:
    """A state source that fails on every read (a bug elsewhere must not kill the server)."""

    @property
    def current(self):
        raise RuntimeError("state source is broken")


def test_internal_error_answers_servfail_and_the_server_lives_on(example_policy, geolite2):
    from dns_helpers import ask

    from director.dns.server import ServerConfig, ServerThread

    app = DnsApp(example_policy, geolite2, BrokenSnapshots())
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        for tcp in (False, True, False):
            response = ask(server.addresses[0], make_query("chat.infer.example.com"), tcp=tcp)
            assert response.rcode() == dns.rcode.SERVFAIL
