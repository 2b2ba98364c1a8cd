"""Signed answers on the wire: what DO queries get, that the caches give byte for byte what
the full path signs through state changes, that signatures are made again when their
window moves, and compact denial (RFC 9824)."""

from __future__ import annotations

import random
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
from test_dns_state_changes import STATES, corpus

from director.dns.app import DnsApp
from director.dns.snapshot_source import StaticSnapshotSource
from director.dnssec.denial import NXNAME
from director.dnssec.signer import NoKeys

ZONE = "infer.example.com"
APEX = dns.name.from_text(ZONE)


@pytest.fixture
def signed(example_policy, geolite2, keys: Path) -> DnsApp:
    return DnsApp(example_policy, geolite2, StaticSnapshotSource(), dnssec_keys=keys)


def _reply(app: DnsApp, name: str, rdtype: str = "A", **kwargs: object) -> dns.message.Message:
    query = make_query(name, rdtype, want_dnssec=True, **kwargs)
    wire = app.respond(query.to_wire(), "127.0.0.1")
    assert wire is not None
    return dns.message.from_wire(wire)


def _dnskeys(app: DnsApp) -> dict:
    reply = _reply(app, ZONE, "DNSKEY")
    return {APEX: reply.answer[0]}


def _validate_all(app: DnsApp, reply: dns.message.Message) -> int:
    """Validate every RRset of ``reply`` against the zone's DNSKEYs; how many were."""
    keys = _dnskeys(app)
    checked = 0
    for section in (reply.answer, reply.authority, reply.additional):
        for rrset in section:
            if rrset.rdtype in (dns.rdatatype.RRSIG, dns.rdatatype.OPT):
                continue
            sigs = next(s for s in section if s.rdtype == dns.rdatatype.RRSIG
                        and s.name == rrset.name and s.covers == rrset.rdtype)
            dns.dnssec.validate(rrset, sigs, keys)
            checked += 1
    return checked


def test_do_queries_get_signed_answers_and_others_get_what_an_unsigned_zone_sends(
        signed: DnsApp, example_policy, geolite2) -> None:
    unsigned = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    for name, rdtype in [("chat.infer.example.com", "A"), (ZONE, "NS"), (ZONE, "SOA"),
                         ("nothing.infer.example.com", "A"), ("chat.infer.example.com", "MX")]:
        reply = _reply(signed, name, rdtype)
        assert reply.flags & dns.flags.AA
        assert _validate_all(signed, reply) >= 1, (name, rdtype)
        plain = make_query(name, rdtype).to_wire()
        assert signed.respond(plain, "127.0.0.1") == unsigned.respond(plain, "127.0.0.1")
    assert unsigned.respond(make_query(ZONE, "DNSKEY").to_wire(), "127.0.0.1") is not None
    no_keys = dns.message.from_wire(unsigned.respond(
        make_query(ZONE, "DNSKEY", want_dnssec=True).to_wire(), "127.0.0.1"))
    assert not no_keys.answer


def test_denial_is_compact(signed: DnsApp) -> None:
    missing = _reply(signed, "no.such.name.infer.example.com")
    assert missing.rcode() == dns.rcode.NOERROR and not missing.answer
    nsec = missing.find_rrset(missing.authority, dns.name.from_text(
        "no.such.name.infer.example.com"), dns.rdataclass.IN, dns.rdatatype.NSEC)
    (record,) = list(nsec)
    assert record.next == dns.name.from_text("\\000.no.such.name.infer.example.com")
    types = {t for window, bits in record.windows for t in _types(window, bits)}
    assert types == {dns.rdatatype.RRSIG, dns.rdatatype.NSEC, NXNAME}

    nodata = _reply(signed, "chat.infer.example.com", "TXT")
    (record,) = list(nodata.find_rrset(nodata.authority, dns.name.from_text(
        "chat.infer.example.com"), dns.rdataclass.IN, dns.rdatatype.NSEC))
    types = {t for window, bits in record.windows for t in _types(window, bits)}
    assert dns.rdatatype.A in types and dns.rdatatype.TXT not in types
    assert _validate_all(signed, nodata) == 2  # the SOA and the NSEC


def _types(window: int, bits: bytes) -> list[int]:
    return [window * 256 + i * 8 + j for i, byte in enumerate(bits) for j in range(8)
            if byte & (0x80 >> j)]


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_cached_signed_answers_equal_the_full_path_through_state_changes(
        example_policy, geolite2, keys: Path, tcp: bool) -> None:
    """Deterministic signatures: the fast path's cached bytes equal a fresh signing."""
    rng = random.Random(5)
    fast_state, full_state = StaticSnapshotSource(), StaticSnapshotSource()
    fast = DnsApp(example_policy, geolite2, fast_state, merge_budget=10**7, dnssec_keys=keys)
    full = DnsApp(example_policy, geolite2, full_state, merge_budget=10**7, dnssec_keys=keys)
    queries = []
    for wire, host in corpus(rng)[::3]:
        query = dns.message.from_wire(wire)
        query.want_dnssec(True)
        queries.append((query.to_wire(), host))
    for name, regions, latency, _ in STATES:
        fast_state.update(regions, latency)
        full_state.update(regions, latency)
        for wire, host in queries:
            got = fast.respond(wire, host, tcp)
            full.handler.decisions.clear()
            assert got == full.respond_full(wire, host, tcp), (name, wire, host)
    assert fast.stats.cache_misses < len(queries) * len(STATES) / 2


def test_a_new_validity_window_signs_again(signed: DnsApp) -> None:
    signer = signed.handler.signer
    assert signer is not None
    first = _reply(signed, "chat.infer.example.com")
    again = _reply(signed, "chat.infer.example.com")
    assert again.answer == first.answer  # from the cache, same signature
    now = time.time()
    signer.clock = lambda: now + signer.window
    later = _reply(signed, "chat.infer.example.com")
    (old,) = [r for r in first.answer if r.rdtype == dns.rdatatype.RRSIG]
    (new,) = [r for r in later.answer if r.rdtype == dns.rdatatype.RRSIG]
    assert new[0].inception == old[0].inception + signer.window
    assert new[0].expiration - new[0].inception >= 14 * 86400


def test_a_large_signed_answer_is_truncated_over_small_udp_and_whole_over_tcp(
        signed: DnsApp) -> None:
    query = make_query(ZONE, "NS", want_dnssec=True, payload=512)
    udp = dns.message.from_wire(signed.respond(query.to_wire(), "127.0.0.1"))
    tcp_wire = signed.respond(query.to_wire(), "127.0.0.1", tcp=True)
    tcp = dns.message.from_wire(tcp_wire)
    if len(tcp_wire) > 512:
        assert udp.flags & dns.flags.TC and not udp.answer
    assert tcp.answer and not tcp.flags & dns.flags.TC


def test_a_zone_without_keys_is_refused_and_bad_key_files_are_skipped(
        example_policy, geolite2, tmp_path: Path, keys: Path) -> None:
    with pytest.raises(NoKeys):
        DnsApp(example_policy, geolite2, StaticSnapshotSource(), dnssec_keys=tmp_path / "none")
    (keys / f"K{ZONE}+013+00001.json").write_text("{not json")
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource(), dnssec_keys=keys)
    assert _validate_all(app, _reply(app, "chat.infer.example.com")) == 1


def test_signing_is_exported_as_metrics(signed: DnsApp, example_policy) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from director.dns.metrics import DnsCollector

    _reply(signed, "chat.infer.example.com")
    before = signed.stats.snapshot()["dnssec"]["signatures"]
    assert before >= 1
    signed.set_policy(example_policy)  # a new signer: the count carries on
    _reply(signed, "chat.infer.example.com")
    registry = CollectorRegistry()
    registry.register(DnsCollector(signed.stats.snapshot))
    samples = {s.name: s.value for family in text_string_to_metric_families(
        generate_latest(registry).decode()) for s in family.samples}
    assert samples["director_dnssec_signatures_total"] > before
    expires = samples["director_dnssec_signatures_expire_timestamp_seconds"]
    assert time.time() + 13 * 86400 < expires < time.time() + 15 * 86400
