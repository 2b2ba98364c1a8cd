"""Service answers written by hand (``service_answer``) equal the full path's, byte for byte.

The fast path builds a template for the first query of each shape and decision class
without dnspython. Over a policy whose regions have one, a few and very many endpoints
(IPv4 and IPv6, an address written two ways), every query shape the fast path takes (name
case, RD/CD, EDNS or none, payload sizes, DO, ECS of both families and several prefix
lengths, UDP and TCP) under two states, the first answer and the template answer after it
must equal the full path's; where the full path truncates, the hand-written template must
decline.
"""

from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path

import dns.flags
import dns.message
import pytest
from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.service_answer import packed_addresses, service_template
from director.dns.snapshot_source import StaticSnapshotSource
from director.dns.types import OUR_PAYLOAD, TCP_LIMIT, UDP_LIMIT_NO_EDNS
from director.dns.wire import parse_query
from director.engine import RegionState
from policies import Policy, load_policy

MANY_V4 = " ".join(f"127.0.1.{n}" for n in range(1, 71))  # over 512 bytes, under 1232
MANY_V6 = " ".join(f"2001:db8::{n:x}" for n in range(1, 61))  # over 1232 bytes
ECS = [None, "81.2.69.0/24", "8.8.8.0/24", "8.8.9.7/32", "0.0.0.0/0", "89.160.20.0/22",
       "2001:db8::/56", "2a02:598::/48"]
NAMES = ["chat.infer.example.com", "CHAT.Infer.example.COM", "embed.infer.example.com",
         "sovereign.infer.example.com"]
STATES = {"calm": {}, "eu-west down": {"eu-west": RegionState(healthy=False)}}


@pytest.fixture(scope="module")
def wide_policy(example_policy_path: Path, tmp_path_factory) -> Policy:
    """The example policy with us-east on 70 IPv4 and 60 IPv6 endpoints and eu-west on
    one IPv4-mapped address written two ways."""
    folder = tmp_path_factory.mktemp("wide") / "examples"
    shutil.copytree(example_policy_path.parent, folder)
    policy_file = folder / example_policy_path.name
    text = policy_file.read_text()
    us_east, eu_west = "    endpoints 127.0.1.1 ::ffff:127.0.1.1\n", "    endpoints 127.0.2.1\n"
    assert text.count(us_east) == 1 and text.count(eu_west) == 1
    text = text.replace(us_east, f"    endpoints {MANY_V4} {MANY_V6}\n").replace(
        eu_west, "    endpoints 127.0.2.1 ::ffff:127.0.2.1 ::ffff:7f00:201\n")
    policy_file.write_text(text)
    return load_policy(str(policy_file))


def _queries(rng: random.Random) -> list[tuple[bytes, bool]]:
    out = []
    for name, rdtype, ecs in itertools.product(NAMES, ["A", "AAAA"], ECS):
        for payload, flags, dnssec in ((1232, 0, False), (512, 0x0100, True),
                                       (4096, 0x0010, False), (0, 0x0110, True)):
            query = make_query(name, rdtype, ecs=ecs, payload=payload,
                               want_dnssec=dnssec, qid=rng.randrange(65536))
            query.flags = flags
            out.append((query.to_wire(), rng.random() < 0.3))
        plain = make_query(name, rdtype, edns=False, qid=rng.randrange(65536))
        out.extend([(plain.to_wire(), False), (plain.to_wire(), True)])
    return out


@pytest.mark.parametrize("state", STATES, ids=list(STATES))
@pytest.mark.parametrize("policy_name", ["example", "wide"])
def test_hand_written_answers_equal_the_full_path(request, policy_name, state, geolite2):
    policy = request.getfixturevalue(
        "example_policy" if policy_name == "example" else "wide_policy")
    fast_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    fast_state.update(STATES[state])
    full_state.update(STATES[state])
    fast = DnsApp(policy, geolite2, fast_state, merge_budget=10**7)
    full = DnsApp(policy, geolite2, full_state, merge_budget=10**7)
    rendered = []  # queries the fast path sent through the dnspython path
    respond_full = fast.fast.responder.respond
    fast.fast.responder.respond = lambda data, host, tcp: (  # type: ignore[method-assign]
        rendered.append(data) or respond_full(data, host, tcp))
    rng = random.Random(3)
    written = truncated = declined = 0
    for data, tcp in _queries(rng):
        expected = full.respond_full(data, "192.0.2.1", tcp)
        for _ in range(2):  # the first answer builds the template, the second reuses it
            assert fast.respond(data, "192.0.2.1", tcp) == expected, (data, tcp)
        reply = dns.message.from_wire(expected)
        parsed = parse_query(data)
        assert parsed is not None
        made = _template_for(fast, parsed, tcp)
        if reply.flags & dns.flags.TC or not reply.answer:
            assert made is None
            truncated += bool(reply.flags & dns.flags.TC)
            declined += 1
            continue
        assert made is not None
        header, tail = made
        ecs = parsed.ecs.address if parsed.ecs is not None else b""
        assert data[:2] + header + data[12:parsed.question_end] + tail + ecs == expected
        # the size check is exact: the answer fits a limit of its own size, not one less
        assert _template_for(fast, parsed, tcp, limit=len(expected)) == made
        assert _template_for(fast, parsed, tcp, limit=len(expected) - 1) is None
        written += 1
    assert written > 100
    assert len(rendered) <= declined  # only what the hand-written path declines
    if policy_name == "wide":
        assert truncated > 10  # the size limits were reached, in both families


def _template_for(app: DnsApp, parsed, tcp: bool,
                  limit: int | None = None) -> tuple[bytes, bytes] | None:
    node = app.fast.zone.wire_nodes[parsed.qname]
    answered = app.fast.decisions.answer(node.service, parsed.ecs, "192.0.2.1")
    decision = answered.decision
    if limit is None:
        limit = TCP_LIMIT if tcp else (
            max(UDP_LIMIT_NO_EDNS, min(parsed.payload, OUR_PAYLOAD)) if parsed.edns
            else UDP_LIMIT_NO_EDNS)
    packed = packed_addresses(app.fast.zone.addresses(decision.regions, parsed.qtype,
                                                      app.fast.decisions.current()[0]))
    return service_template(parsed, packed, int(decision.ttl), answered.scope, limit)


def test_addresses_written_two_ways_are_one_record() -> None:
    assert packed_addresses(["::ffff:127.0.2.1", "2001:db8::1", "::ffff:7f00:201"]) == [
        bytes(10) + b"\xff\xff\x7f\x00\x02\x01", bytes.fromhex("20010db8" + "0" * 23 + "1")]
