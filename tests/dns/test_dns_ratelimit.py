"""Response rate limiting: token bucket per /24 and /56, slip 2, off / log-only / enforce."""

from __future__ import annotations

import contextlib
import socket
import struct
import urllib.request

import pytest
from dns_helpers import ServerProcess, bulk_udp, make_query

from director.dns.metrics import DnsStats
from director.dns.ratelimit import (
    ALLOW,
    SLIP,
    ResponseRateLimiter,
    RrlMode,
    default_mode,
    network_key,
)
from director.dns.wire import truncated

QUERY = make_query("chat.infer.example.com").to_wire()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _limiter(mode: RrlMode, **kwargs: float) -> tuple[ResponseRateLimiter, Clock, DnsStats]:
    clock, stats = Clock(), DnsStats()
    return ResponseRateLimiter(mode, stats, clock=clock, **kwargs), clock, stats


@pytest.mark.parametrize(("host", "key"), [
    ("192.0.2.1", "192.0.2"), ("192.0.2.254", "192.0.2"), ("2001:db8:0:ff::1", "20010db8000000"),
    ("2001:db8:0:ff:1::1", "20010db8000000"), ("::ffff:192.0.2.9", "192.0.2"),
], ids=["v4", "v4-same-24", "v6", "v6-same-56", "v4-mapped"])
def test_networks_are_slash_24_and_slash_56(host, key):
    assert network_key(host) == key


@pytest.mark.parametrize(("hosts", "mode"), [
    (["127.0.0.1"], RrlMode.LOG_ONLY), (["127.0.0.1", "::1"], RrlMode.LOG_ONLY),
    (["localhost"], RrlMode.LOG_ONLY), (["0.0.0.0"], RrlMode.ENFORCE),
    (["::"], RrlMode.ENFORCE), (["127.0.0.1", "192.0.2.53"], RrlMode.ENFORCE),
    (["2001:db8::53"], RrlMode.ENFORCE),
], ids=["v4-loopback", "both-loopbacks", "localhost", "v4-any", "v6-any",
        "loopback-and-public", "v6-public"])
def test_without_rrl_given_loopback_logs_and_anything_else_enforces(hosts, mode):
    assert default_mode(hosts) is mode


ANSWER = (True, None)


def test_enforce_passes_the_burst_then_slips_every_second_limited_query():
    limiter, clock, stats = _limiter(RrlMode.ENFORCE, rate=5, burst=5)
    out = [limiter.check("192.0.2.1", QUERY) for _ in range(15)]
    assert out[:5] == [ANSWER] * 5
    limited = out[5:]
    assert limited == [(False, None), (False, truncated(QUERY))] * 5
    assert stats.rrl == {"dropped": 5, "slipped": 5}
    slip = truncated(QUERY)
    assert slip[2] & 0x82 == 0x82 and slip[:2] == QUERY[:2]  # QR and TC, the query's ID
    assert slip[4:6] == b"\x00\x01" and slip[12:] == QUERY[12:12 + len(slip) - 12]
    clock.now += 1.0  # a second later: 5 more tokens
    assert [limiter.check("192.0.2.77", QUERY) for _ in range(5)] == [ANSWER] * 5
    assert limiter.check("198.51.100.1", QUERY) == ANSWER  # another network


def test_raw_network_bytes_share_the_buckets_rules():
    limiter, _clock, stats = _limiter(RrlMode.ENFORCE, rate=2, burst=2, slip=1)
    verdicts = [limiter.limit(bytes((192, 0, 2)), 100.0) for _ in range(4)]
    assert verdicts == [ALLOW, ALLOW, SLIP, SLIP] and stats.rrl == {"slipped": 2}


def test_log_only_counts_but_answers():
    limiter, _clock, stats = _limiter(RrlMode.LOG_ONLY, rate=2, burst=2)
    assert all(limiter.check("192.0.2.1", QUERY) == ANSWER for _ in range(10))
    assert stats.rrl == {"would-limit": 8}


def test_enforced_over_the_wire_with_tcp_capped_per_network():
    """The shipped deployments' settings through the command line: RRL enforced with slip
    2 on UDP, and TCP connections capped per client /24, both counted in the metrics."""
    with ServerProcess("--rrl", "enforce", "--rrl-rate", "5", "--rrl-slip", "2",
                       "--tcp-max-per-network", "1",
                       "--metrics", "127.0.0.1:0") as server:
        queries = [make_query("chat.infer.example.com", ecs="8.8.8.0/24", qid=i).to_wire()
                   for i in range(100)]
        replies = bulk_udp(server.address, queries, window=100)
        full = [r for r in replies.values() if not r[2] & 0x02]
        slipped = [r for r in replies.values() if r[2] & 0x02]
        assert 5 <= len(full) <= 15  # the burst (plus refill while sending)
        assert 35 <= len(slipped) <= 55  # half of the limited ones, truncated
        assert len(replies) < 70  # the other half were dropped
        with socket.create_connection(server.address, 3, ("127.0.9.1", 0)) as first:
            tcp_query = make_query("chat.infer.example.com", qid=1).to_wire()
            first.sendall(struct.pack("!H", len(tcp_query)) + tcp_query)
            assert first.recv(2)  # answered (TCP is never rate limited)
            with socket.create_connection(server.address, 3, ("127.0.9.2", 0)) as second:
                second.settimeout(2)
                with contextlib.suppress(ConnectionResetError):
                    assert second.recv(1) == b""  # closed at once: over the /24's cap
        assert server.metrics is not None
        url = "http://{}:{}/metrics".format(*server.metrics)
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        assert 'director_dns_tcp_refused_total{reason="per-network"} 1.0' in text
        assert 'director_dns_rrl_total{action="slipped"}' in text
    # the one command line logs what it decided
    assert "response rate limiting: enforce (5 responses/s per network, slip 2)" in \
        server.logged()


def test_two_workers_limit_a_network_once_not_once_each():
    """Queries without ECS are steered by source /24, the limiter's own key, so each
    network's bucket lives in one worker: two workers do not double its rate."""
    with ServerProcess("--workers", "2", "--rrl", "enforce", "--rrl-rate", "20") as server:
        queries = [make_query("chat.infer.example.com", qid=i).to_wire() for i in range(200)]
        replies = bulk_udp(server.address, queries, window=200)
        full = [r for r in replies.values() if not r[2] & 0x02]
        assert 20 <= len(full) <= 32  # one burst of 20 (plus refill while sending), not two


def test_off_answers_everything():
    with ServerProcess("--rrl", "off") as server:
        queries = [make_query("chat.infer.example.com", qid=i).to_wire() for i in range(100)]
        replies = bulk_udp(server.address, queries, window=100)
        assert len(replies) == 100 and not any(r[2] & 0x02 for r in replies.values())
