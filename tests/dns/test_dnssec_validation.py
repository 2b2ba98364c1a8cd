"""Signed answers through a real validating resolver: Unbound with the zone's DS as its
trust anchor resolves through director and every answer validates (AD), through a state
change that fails a region over and two rollovers of the combined signing key, one of them
with the parent's DS set moving (Unbound started again with the new anchor).

Unbound keeps nothing in cache here (``cache-max-ttl: 0``): every query reaches director,
so each moment of the rollover is judged on its own.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.dnssec import signer as signer_module
from director.dnssec.key_directory import load_keys, save_keys
from director.dnssec.keys import Role, generate
from director.dnssec.timeline import Ttls, confirm_ds, start_rollover, state_at
from director.dnssec.zone_ttls import policy_ttls
from director.engine import RegionState
from director.lab.resolver import Resolver

ZONE = "infer.example.com"
NAMES = [("chat.infer.example.com", "A"), ("chat.infer.example.com", "AAAA"),
         ("infer.example.com", "SOA"), ("infer.example.com", "NS"),
         ("infer.example.com", "DNSKEY"), ("nothing-here.infer.example.com", "A"),
         ("chat.infer.example.com", "MX"), ("ns1.infer.example.com", "A")]
QUICK = Ttls(dnskey=0, largest=0.5, propagation=0.0, parent_ds=0.0)


@pytest.fixture
def signed(example_policy, geolite2, keys: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServerThread,
                                                              StaticSnapshotSource]]:
    monkeypatch.setattr(signer_module, "POLL", 0.05)
    snapshots = StaticSnapshotSource()
    app = DnsApp(example_policy, geolite2, snapshots, dnssec_keys=keys)
    config = ServerConfig(listen=(("127.0.0.1", 0),), tcp_idle_timeout=1.0)
    with ServerThread(app, config) as running:
        yield running, snapshots


def _ds(keys: Path) -> list[str]:
    return [k.ds_text() for k in state_at(load_keys(keys, ZONE), time.time()).for_parent]


def _ask(port: int, name: str, rdtype: str) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, want_dnssec=True)
    return dns.query.udp(query, "127.0.0.1", port=port, timeout=3.0)


def _all_validate(port: int) -> list[str]:
    """Every name's answer through the resolver; what did not validate."""
    bad = []
    for name, rdtype in NAMES:
        reply = _ask(port, name, rdtype)
        if reply.rcode() not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN) \
                or not reply.flags & dns.flags.AD:
            bad.append(f"{name} {rdtype}: {dns.rcode.to_text(reply.rcode())} "
                       f"flags {dns.flags.to_text(reply.flags)}")
    return bad


def _wait_for(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_answers_validate_through_failover_and_two_rollovers(signed, keys: Path,
                                                             tmp_path: Path) -> None:
    server, snapshots = signed
    port = server.addresses[0][1]
    resolver = Resolver(ZONE, [f"127.0.0.1@{port}"], tmp_path / "unbound",
                        trust_anchors=_ds(keys)).start("chat.infer.example.com")
    try:
        assert _all_validate(resolver.port) == []
        before = _ask(resolver.port, "chat.infer.example.com", "A")
        assert before.flags & dns.flags.AD and before.answer

        # A failover: the regions answered go down, the answer moves and still validates.
        first = {rr.address for rr in before.answer[0]}
        down = {region: RegionState(healthy=False) for region in ("us-east", "eu-west")}
        snapshots.update(regions=down)
        after = _ask(resolver.port, "chat.infer.example.com", "A")
        assert after.flags & dns.flags.AD
        assert {rr.address for rr in after.answer[0]} != first
        assert _all_validate(resolver.port) == []

        for _ in range(2):  # two CSK rollovers, the parent's DS moving in each
            old = load_keys(keys, ZONE)
            rolled = start_rollover(old, Role.CSK, time.time(), QUICK)
            save_keys(keys, rolled)
            new = max(rolled, key=lambda k: k.created)
            _wait_for(lambda: len(_ask(port, ZONE, "DNSKEY").answer[0]) == 2)
            assert _all_validate(resolver.port) == []  # double signature, old DS
            resolver.restart([new.ds_text()], "chat.infer.example.com")  # the parent moved
            assert _all_validate(resolver.port) == []
            save_keys(keys, confirm_ds(rolled, new.tag, time.time(), QUICK))
            _wait_for(lambda: len(_ask(port, ZONE, "DNSKEY").answer[0]) == 1)
            assert _all_validate(resolver.port) == []
            dnskeys = _ask(port, ZONE, "DNSKEY").answer[0]
            assert [dns.dnssec.key_id(rr) for rr in dnskeys] == [new.tag]
    finally:
        resolver.stop()


def test_a_wrong_trust_anchor_makes_every_answer_bogus(signed, tmp_path: Path) -> None:
    """The control: the same resolver with another key's DS as anchor validates nothing."""
    server, _ = signed
    stranger = generate(ZONE, Role.CSK, time.time())
    resolver = Resolver(ZONE, [f"127.0.0.1@{server.addresses[0][1]}"], tmp_path / "unbound",
                        trust_anchors=[stranger.ds_text()])
    resolver.start("chat.infer.example.com", require_answer=False)
    try:
        assert len(_all_validate(resolver.port)) == len(NAMES)
        assert _ask(resolver.port, "chat.infer.example.com", "A").rcode() == \
            dns.rcode.SERVFAIL
    finally:
        resolver.stop()


def test_a_zone_signed_with_a_ksk_and_a_zsk_validates_through_a_zsk_rollover(
        example_policy, geolite2, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signer_module, "POLL", 0.05)
    keys = tmp_path / "keys"
    now = time.time() - 60
    save_keys(keys, [generate(ZONE, Role.KSK, now), generate(ZONE, Role.ZSK, now)])
    # Unbound's key cache keeps a DNSKEY set for its TTL whatever cache-max-ttl says, which
    # is what pre-publication waits out: TTLs of 1 s keep the test short and the
    # rollover's timings true to them.
    quick = dataclasses.replace(
        example_policy, zone=dataclasses.replace(example_policy.zone, ttl=1.0),
        services=tuple(dataclasses.replace(s, ttl=1.0, degraded_ttl=1.0)
                       for s in example_policy.services))
    app = DnsApp(quick, geolite2, StaticSnapshotSource(), dnssec_keys=keys)
    config = ServerConfig(listen=(("127.0.0.1", 0),), tcp_idle_timeout=1.0)
    with ServerThread(app, config) as server:
        port = server.addresses[0][1]
        resolver = Resolver(ZONE, [f"127.0.0.1@{port}"], tmp_path / "unbound",
                            trust_anchors=_ds(keys)).start("chat.infer.example.com")
        try:
            assert _all_validate(resolver.port) == []
            rolled = start_rollover(load_keys(keys, ZONE), Role.ZSK, time.time(),
                                    policy_ttls(quick, propagation=0.5))
            assert max(k.remove or 0 for k in rolled) - time.time() < 10  # within the loop
            save_keys(keys, rolled)
            deadline = max(k.remove or 0 for k in rolled) - time.time() + time.monotonic() + 1
            while time.monotonic() < deadline:  # published, then signing, then alone
                assert _all_validate(resolver.port) == []
            tags = [dns.dnssec.key_id(rr) for rr in _ask(port, ZONE, "DNSKEY").answer[0]]
            new = max(rolled, key=lambda k: k.created)
            assert sorted(tags) == sorted([k.tag for k in rolled if k.role is Role.KSK]
                                          + [new.tag])
        finally:
            resolver.stop()
