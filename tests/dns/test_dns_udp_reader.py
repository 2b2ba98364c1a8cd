"""The UDP reader thread (the default transport on Linux with rate limiting off): memo hits
answered on the thread, everything else by the event loop, and the two never disagree:
snapshot and policy swaps are seen at once, every answer is counted, a stalled loop costs
drops and not memory, and stopping is prompt. Real packets over loopback."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import dns.message
import pytest
from dns_helpers import a_addresses, ask, ask_wire, bulk_udp, make_query

from director.dns.app import DnsApp
from director.dns.ratelimit import RrlMode
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.dns.transports import mmsg, udp_reader
from director.engine.snapshot import RegionState

pytestmark = pytest.mark.skipif(not mmsg.available(), reason="no recvmmsg in this libc")

LISTEN = (("127.0.0.1", 0), ("::1", 0))


@pytest.fixture
def snapshots():
    return StaticSnapshotSource()


@pytest.fixture
def app(example_policy, geolite2, snapshots):
    return DnsApp(example_policy, geolite2, snapshots, rrl_mode=RrlMode.OFF)  # readers need it


@pytest.fixture
def server(app):
    with ServerThread(app, ServerConfig(listen=LISTEN, udp_threads=True)) as running:
        yield running


def test_the_default_transport_reads_each_socket_in_a_thread(server):
    readers = server.server.udp_readers
    assert len(readers) == 2
    assert all(reader._thread.is_alive() for reader in readers)


def test_rate_limiting_keeps_every_datagram_on_the_event_loop(example_policy, geolite2):
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource(), rrl_mode=RrlMode.LOG_ONLY)
    with ServerThread(app, ServerConfig(listen=LISTEN, udp_threads=True)) as running:
        assert running.server.udp_readers == []
        assert ask(running.addresses[0], make_query("chat.infer.example.com")).answer


@pytest.mark.parametrize("family", [0, 1], ids=["ipv4", "ipv6"])
def test_memo_hits_answered_on_the_thread_are_counted(server, app, family):
    query = make_query("embed.infer.example.com", ecs="8.8.8.0/24")
    for qid in range(20):
        query.id = qid
        response = ask(server.addresses[family], query)
        assert response.id == qid and a_addresses(response) == {"127.0.1.1"}
    on_thread = sum(sum(reader.counters.counts) for reader in server.server.udp_readers)
    assert on_thread >= 18  # the first query (at least) is a miss, answered by the loop
    assert sum(app.stats.responses.values()) == 20


def test_a_snapshot_swap_is_seen_by_the_next_query(server, snapshots):
    query = make_query("embed.infer.example.com", ecs="8.8.8.0/24")
    for _ in range(5):  # memoised: answered on the reader thread from here
        assert a_addresses(ask(server.addresses[0], query)) == {"127.0.1.1"}  # us-east
    snapshots.update({"us-east": RegionState(healthy=False)})
    assert a_addresses(ask(server.addresses[0], query)) == {"127.0.2.1"}  # eu-west
    snapshots.update({"us-east": RegionState(healthy=True)})
    assert a_addresses(ask(server.addresses[0], query)) == {"127.0.1.1"}


def test_a_policy_swap_is_seen_by_the_next_query(server, app, example_policy):
    query = make_query("embed.infer.example.com", ecs="8.8.8.0/24")
    for _ in range(5):
        assert a_addresses(ask(server.addresses[0], query)) == {"127.0.1.1"}
    regions = tuple(dataclasses.replace(r, endpoints_v4=("127.0.9.9",))
                    if r.name == "us-east" else r for r in example_policy.regions)
    server.loop.call_soon_threadsafe(app.set_policy,
                                     dataclasses.replace(example_policy, regions=regions))
    time.sleep(0.1)
    assert a_addresses(ask(server.addresses[0], query)) == {"127.0.9.9"}


def test_a_stalled_event_loop_costs_drops_not_memory(server, app, monkeypatch):
    """Misses wait for the event loop; past the handover limit they are dropped (counted),
    like datagrams over a full socket buffer, and the server answers again afterwards."""
    monkeypatch.setattr(udp_reader, "HANDOVER_LIMIT", 50)
    release = threading.Event()
    server.loop.call_soon_threadsafe(release.wait, 5)
    try:
        queries = []
        for qid in range(300):  # 300 distinct names: every one a miss
            query = make_query(f"nope{qid}.infer.example.com")
            query.id = qid
            queries.append(query.to_wire())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for wire in queries:
                sock.sendto(wire, server.addresses[0])
        deadline = time.monotonic() + 5
        while app.stats.snapshot()["dropped"] < 250 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        release.set()
    dropped = app.stats.snapshot()["dropped"]
    assert dropped >= 250
    readers = server.server.udp_readers
    assert sum(reader.handed for reader in readers) <= 50  # nothing past the limit was kept
    deadline = time.monotonic() + 5
    while any(r.answered < r.handed for r in readers) and time.monotonic() < deadline:
        time.sleep(0.01)  # the loop works off the backlog
    assert sum(reader.answered for reader in readers) + dropped == 300
    response = ask(server.addresses[0], make_query("nope.infer.example.com"))
    assert response.rcode() == 3  # NXDOMAIN: service goes on


def test_a_burst_of_misses_is_answered_in_full_by_the_loop(server):
    queries = []
    for qid in range(2000):  # 2,000 distinct /24s: a miss each the first time
        query = make_query("chat.infer.example.com", ecs=f"{qid % 200 + 1}.{qid // 200}.3.0/24")
        query.id = qid
        queries.append(query.to_wire())
    replies = bulk_udp(server.addresses[0], queries, window=200)
    assert len(replies) >= 1990
    for qid in list(replies)[:100]:
        assert dns.message.from_wire(replies[qid]).id == qid


def test_stop_wakes_the_threads_then_closes_the_sockets(app, monkeypatch):
    """A blocked read is woken by the shutdown, not by its receive timeout (set here far
    longer than any stop may take)."""
    monkeypatch.setattr(udp_reader, "WAKE_INTERVAL", 60.0)
    running = ServerThread(app, ServerConfig(listen=LISTEN, udp_threads=True)).start()
    readers = list(running.server.udp_readers)
    address = running.addresses[0]
    assert ask_wire(address, make_query("chat.infer.example.com").to_wire())
    started = time.monotonic()
    running.stop()
    assert time.monotonic() - started < 20
    assert not any(reader._thread.is_alive() for reader in readers)
    assert all(reader.sock.fileno() == -1 for reader in readers)

