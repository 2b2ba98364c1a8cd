"""Every rcode and record case over real UDP and TCP (IPv4 and IPv6), against golden answers."""

from __future__ import annotations

import dns.flags
import dns.rcode
import pytest
from dns_helpers import GOLDEN, ask, golden_text
from dns_protocol_cases import CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_answers(server, case):
    expected = (GOLDEN / f"{case.name}.txt").read_text()
    for transport in case.transports:
        response = ask(server.addresses[0], case.build(), tcp=transport == "tcp")
        assert golden_text(response) == expected, f"{case.name} over {transport}"


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_ipv6_listener_answers_the_same(server, tcp):
    case = next(c for c in CASES if c.name == "service-a-ecs-eu")
    v4 = ask(server.addresses[0], case.build(), tcp=tcp)
    v6 = ask(server.addresses[1], case.build(), tcp=tcp)
    assert golden_text(v4) == golden_text(v6)


def test_truncated_answer_has_tc_and_nothing_else(server):
    case = next(c for c in CASES if c.name == "explain-tc-over-udp")
    response = ask(server.addresses[0], case.build())
    assert response.flags & dns.flags.TC
    assert not response.answer and not response.authority
    full = ask(server.addresses[0], case.build(), tcp=True)
    assert full.answer and len(full.to_wire()) > 512


def test_explain_is_refused_outside_admin_networks(example_policy, geolite2):
    import dataclasses

    from dns_helpers import make_query

    from director.dns.app import DnsApp
    from director.dns.server import ServerConfig, ServerThread
    from director.dns.snapshot_source import StaticSnapshotSource

    zone = dataclasses.replace(example_policy.zone, admin_networks=("192.0.2.0/24",))
    policy = dataclasses.replace(example_policy, zone=zone)
    app = DnsApp(policy, geolite2, StaticSnapshotSource())
    with ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server:
        response = ask(server.addresses[0], make_query("_explain.chat.infer.example.com", "TXT"))
        assert response.rcode() == dns.rcode.REFUSED
        assert not response.answer
        assert not response.flags & dns.flags.AA
