"""Denials written by hand: the compact one validates, both say what the full path says
(same rcode and records, ECS echoed, any case of the name), they stay in the transport's
size limit, and names outside the zone or only looking like it are not denied."""

from __future__ import annotations

import time
from pathlib import Path

import dns.dnssec
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import pytest
from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.dnssec.key_directory import save_keys
from director.dnssec.keys import Role, generate

ZONE = "infer.example.com"


@pytest.fixture(params=["csk", "ksk+zsk"])
def signed(request, example_policy, geolite2, tmp_path: Path) -> DnsApp:
    now = time.time() - 60
    roles = [Role.CSK] if request.param == "csk" else [Role.KSK, Role.ZSK]
    save_keys(tmp_path, [generate(ZONE, role, now) for role in roles])
    return DnsApp(example_policy, geolite2, StaticSnapshotSource(), dnssec_keys=tmp_path)


def _sections(message: dns.message.Message) -> list:
    """The records, names lower-cased, RRSIGs by what they cover (signatures differ where
    the full path keeps the case of the NSEC's next name, RFC 6840 5.1: both valid)."""
    return [sorted(rrset.to_text().lower() if rrset.rdtype != dns.rdatatype.RRSIG
                   else f"{rrset.name.to_text().lower()} rrsig {rrset.covers} x{len(rrset)}"
                   for rrset in section)
            for section in (message.answer, message.authority)]


def _validate(signed: DnsApp, reply: dns.message.Message) -> None:
    keys = dns.message.from_wire(signed.respond(
        make_query(ZONE, "DNSKEY", want_dnssec=True).to_wire(), "127.0.0.1")).answer[0]
    for rrset in reply.authority:
        if rrset.rdtype != dns.rdatatype.RRSIG:
            sigs = reply.find_rrset(reply.authority, rrset.name, rrset.rdclass,
                                    dns.rdatatype.RRSIG, rrset.rdtype)
            dns.dnssec.validate(rrset, sigs, {keys.name: keys})


@pytest.mark.parametrize("name,ecs", [("nope.infer.example.com", None),
                                      ("A.Deep.NoPe.Infer.Example.COM", "81.2.69.0/24"),
                                      ("_explain.nope.infer.example.com", "2001:db8::/56")])
def test_the_hand_made_denial_validates_and_equals_the_full_path(
        signed: DnsApp, name: str, ecs: str | None) -> None:
    query = make_query(name, "AAAA", want_dnssec=True, ecs=ecs)
    fast = dns.message.from_wire(signed.respond(query.to_wire(), "127.0.0.1"))
    full = dns.message.from_wire(signed.respond_full(query.to_wire(), "127.0.0.1"))
    assert fast.rcode() == full.rcode() == dns.rcode.NOERROR
    assert fast.flags == full.flags and fast.question == full.question
    assert _sections(fast) == _sections(full)
    assert fast.options == full.options and fast.ednsflags == full.ednsflags
    _validate(signed, fast)
    _validate(signed, full)


def test_what_is_not_a_compact_denial_goes_the_full_way(signed: DnsApp) -> None:
    # a label that holds the apex's bytes is not under the apex: REFUSED
    fake = dns.name.Name((b"x\x05infer\x07example\x03com", b""))  # one label
    query = make_query("x.com", "A", want_dnssec=True)
    query.question[0] = dns.rrset.RRset(fake, dns.rdataclass.IN, dns.rdatatype.A)
    reply = dns.message.from_wire(signed.respond(query.to_wire(), "127.0.0.1"))
    assert reply.rcode() == dns.rcode.REFUSED
    nxname = make_query("nope.infer.example.com", "TYPE128", want_dnssec=True)
    assert dns.message.from_wire(signed.respond(nxname.to_wire(), "127.0.0.1")).rcode() == \
        dns.rcode.FORMERR  # RFC 9824 section 3.5
    axfr = make_query("nope.infer.example.com", "AXFR", want_dnssec=True)
    assert dns.message.from_wire(signed.respond(axfr.to_wire(), "127.0.0.1")).rcode() == \
        dns.rcode.REFUSED



@pytest.mark.parametrize("edns,ecs", [(False, None), (True, None), (True, "81.2.69.0/24")])
def test_the_unsigned_denial_is_the_full_paths_byte_for_byte(
        signed: DnsApp, example_policy, geolite2, edns: bool, ecs: str | None) -> None:
    unsigned = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    for app in (signed, unsigned):  # no DO, or no keys: NXDOMAIN, unsigned
        for name in ("No.Such.infer.example.com", "x.ns1.infer.example.com",
                     "a.b.c.d.e.f.infer.example.com", "_explain.x.infer.example.com"):
            wire = make_query(name, "A", edns=edns, ecs=ecs).to_wire()
            fast = app.respond(wire, "127.0.0.1")
            assert fast == app.respond_full(wire, "127.0.0.1"), name  # byte for byte
            assert dns.message.from_wire(fast).rcode() == dns.rcode.NXDOMAIN


def test_a_denial_over_a_small_udp_size_is_truncated(signed: DnsApp) -> None:
    long_name = ".".join(["x" * 60] * 3) + ".infer.example.com"
    query = make_query(long_name, "A", want_dnssec=True, payload=512)
    reply = dns.message.from_wire(signed.respond(query.to_wire(), "127.0.0.1"))
    assert reply.flags & dns.flags.TC and not reply.authority
    whole = signed.respond(query.to_wire(), "127.0.0.1", tcp=True)
    assert len(whole) > 512 and dns.message.from_wire(whole).authority
