"""Keyless edges: a DNS server without the private key answers with signatures the control
plane published in a real Valkey, and Unbound validates them (classic NSEC denial
included) through a failover; an answer the edge has no signature for is SERVFAIL, is
reported, and validates once the signer has signed it; a forged report is not signed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import redis
from test_dnssec_validation import NAMES, ZONE, _all_validate, _ask

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.dns.zone import ZoneData
from director.dnssec.key_directory import save_keys
from director.dnssec.keys import Role, generate
from director.dnssec.presign import Presigner, acceptable
from director.dnssec.presigned import PresignedSigner, current_key, signed_key
from director.dnssec.signer import ZoneSigner
from director.dnssec.variants import rrset_id
from director.engine import RegionState
from director.lab.resolver import Resolver


@pytest.fixture
def client(valkey) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(valkey.url, decode_responses=True)
    yield connection
    connection.close()


@pytest.fixture
def presigner(tmp_path: Path, client: redis.Redis, prefix: str) -> Presigner:
    keys = tmp_path / "keys"
    save_keys(keys, [generate(ZONE, Role.CSK, time.time() - 60)])
    return Presigner(client, prefix, ZoneSigner(ZONE, keys, 30))


def _edge(example_policy, geolite2, valkey, prefix: str,
          snapshots: StaticSnapshotSource) -> DnsApp:
    app = DnsApp(example_policy, geolite2, snapshots, dnssec_presigned=valkey.url,
                 state_prefix=prefix)
    assert isinstance(app.handler.signer, PresignedSigner) and app.dnssec_keys is None
    app._follower.poll = 0.05  # type: ignore[union-attr]
    return app


def test_a_keyless_edge_validates_through_a_failover_and_learns_what_it_missed(
        example_policy, geolite2, valkey, prefix: str, client: redis.Redis,
        presigner: Presigner, tmp_path: Path) -> None:
    presigner.round(example_policy)
    snapshots = StaticSnapshotSource()
    app = _edge(example_policy, geolite2, valkey, prefix, snapshots)
    config = ServerConfig(listen=(("127.0.0.1", 0),), tcp_idle_timeout=1.0)
    with ServerThread(app, config) as server:
        port = server.addresses[0][1]
        anchors = [k.ds_text() for k in presigner.signer.state.for_parent]
        resolver = Resolver(ZONE, [f"127.0.0.1@{port}"], tmp_path / "unbound",
                            trust_anchors=anchors).start("chat.infer.example.com")
        try:
            assert _all_validate(resolver.port) == []
            metrics = app.stats.snapshot()["dnssec"]
            assert abs(metrics["presigned_generation"] - time.time()) < 60
            assert metrics["expiration"] > time.time() + 13 * 86400
            missing = _ask(port, "nothing-here.infer.example.com", "A")
            assert missing.rcode() == dns.rcode.NXDOMAIN  # a classic NSEC proof
            snapshots.update(regions={r: RegionState(healthy=False)
                                      for r in ("us-east", "eu-west")})
            assert _all_validate(resolver.port) == []

            # Take one answer's signature away: SERVFAIL, reported, signed, validated.
            answer = _ask(port, "chat.infer.example.com", "A").answer[0]
            meta = json.loads(client.get(current_key(prefix)))
            client.hdel(signed_key(prefix, meta["generation"]), rrset_id(answer))
            client.set(current_key(prefix), json.dumps(meta | {"generation": "stripped"}))
            client.rename(signed_key(prefix, meta["generation"]),
                          signed_key(prefix, "stripped"))
            deadline = time.monotonic() + 5
            while app.handler.signer.generation != "stripped":  # type: ignore[union-attr]
                assert time.monotonic() < deadline
                time.sleep(0.05)
            failed = _ask(resolver.port, "chat.infer.example.com", "A")
            assert failed.rcode() == dns.rcode.SERVFAIL
            assert app.stats.snapshot()["dnssec"]["presigned_misses"] >= 1
            time.sleep(0.2)  # the edge reports its miss
            presigner.published = ()
            assert presigner.round(example_policy)
            assert presigner.learned  # the edge's report
            deadline = time.monotonic() + 5
            while _ask(port, "chat.infer.example.com", "A").rcode() != dns.rcode.NOERROR:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            # Unbound keeps away from a server that answered SERVFAIL (its infra cache);
            # with one server only, a fresh start shows the edge's answer validates.
            resolver.restart(anchors, "chat.infer.example.com")
            assert _all_validate(resolver.port) == []
        finally:
            resolver.stop()
            app.close()


def test_an_edge_before_any_publication_fails_signed_answers_only(
        example_policy, geolite2, valkey, prefix: str, monkeypatch) -> None:
    monkeypatch.setattr("director.dns.app.PRESIGNED_WAIT", 0.2)
    app = _edge(example_policy, geolite2, valkey, prefix, StaticSnapshotSource())
    signed = dns.message.make_query("chat.infer.example.com", "A", want_dnssec=True)
    plain = dns.message.make_query("chat.infer.example.com", "A")
    reply = dns.message.from_wire(app.respond(signed.to_wire(), "127.0.0.1"))
    assert reply.rcode() == dns.rcode.SERVFAIL
    reply = dns.message.from_wire(app.respond(plain.to_wire(), "127.0.0.1"))
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer
    assert not reply.flags & dns.flags.TC and len(NAMES) > 0
    app.close()


def test_the_signer_signs_only_answers_the_zone_could_give(example_policy) -> None:
    zone = ZoneData(example_policy)
    assert acceptable(zone, "chat.infer.example.com. 5 IN A 127.0.1.1") is not None
    two = "chat.infer.example.com. 2 IN A 127.0.1.1\nchat.infer.example.com. 2 IN A 127.0.2.1"
    assert acceptable(zone, two) is not None
    for forged in ["chat.infer.example.com. 5 IN A 6.6.6.6",
                   "infer.example.com. 30 IN A 127.0.1.1",
                   "chat.infer.example.com. 30 IN A 127.0.1.1",
                   "chat.infer.example.com. 5 IN TXT hello",
                   "evil.example.net. 30 IN A 127.0.1.1", "", "garbage"]:
        assert acceptable(zone, forged) is None, forged


def test_a_keyless_edge_denies_with_its_chain_and_plain_queries_by_hand(
        example_policy, geolite2, valkey, prefix: str, presigner: Presigner) -> None:
    presigner.round(example_policy)
    app = _edge(example_policy, geolite2, valkey, prefix, StaticSnapshotSource())
    try:
        signed = dns.message.make_query("no.such.infer.example.com", "A", want_dnssec=True)
        reply = dns.message.from_wire(app.respond(signed.to_wire(), "127.0.0.1"))
        assert reply.rcode() == dns.rcode.NXDOMAIN  # classic NSEC, pre-signed
        assert {r.rdtype for r in reply.authority} >= {dns.rdatatype.NSEC,
                                                       dns.rdatatype.RRSIG}
        plain = dns.message.make_query("no.such.infer.example.com", "A").to_wire()
        assert app.respond(plain, "127.0.0.1") == app.respond_full(plain, "127.0.0.1")
    finally:
        app.close()
