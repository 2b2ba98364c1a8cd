"""The UDP transports answer alike: batched recvmmsg/sendmmsg in a reader thread (the default
on Linux), the same batches from the event loop (with rate limiting on), and the
recvfrom/sendto loop (the fallback). Real packets, IPv4 and IPv6 peers, bursts that span
many batches, and datagrams too long for a batch slot."""

from __future__ import annotations

import socket

import dns.message
import pytest
from dns_helpers import ask_wire, bulk_udp, make_query
from dns_protocol_cases import CASES

from director.dns.app import DnsApp
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource
from director.dns.transports import mmsg
from director.dns.transports.mmsg import MmsgEndpoint

pytestmark = pytest.mark.skipif(not mmsg.available(), reason="no recvmmsg in this libc")

LISTEN = (("127.0.0.1", 0), ("::1", 0))
BATCHED = pytest.mark.parametrize("transport", [0, 1], ids=["thread", "loop"])


@pytest.fixture
def servers(example_policy, geolite2):
    """Batched in a thread, batched from the loop, and plain, over the same policy and state."""
    running = []
    for batched, threads in ((True, True), (True, False), (False, False)):
        app = DnsApp(example_policy, geolite2, StaticSnapshotSource())
        config = ServerConfig(listen=LISTEN, udp_mmsg=batched, udp_threads=threads)
        running.append(ServerThread(app, config).start())
    yield running
    for server in running:
        server.stop()


def test_the_default_transport_is_batched(example_policy, geolite2):
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    with ServerThread(app, ServerConfig(listen=LISTEN)) as server:
        assert [type(e) for e in server.server.udp_endpoints] == [MmsgEndpoint, MmsgEndpoint]
        assert ask_wire(server.addresses[0], make_query("chat.infer.example.com",
                                                        ecs="8.8.8.0/24").to_wire())


@pytest.mark.parametrize("family", [0, 1], ids=["ipv4", "ipv6"])
def test_every_protocol_case_gets_the_same_bytes_from_each(servers, family):
    threaded, batched, plain = (server.addresses[family] for server in servers)
    for case in CASES:
        if "udp" not in case.transports:
            continue
        query = case.build()
        query.id = 4242
        wire = query.to_wire()
        want = ask_wire(plain, wire)
        for _ in range(2):  # the second time from the memo, where the case is memoised
            assert ask_wire(batched, wire) == want, case.name
            assert ask_wire(threaded, wire) == want, case.name


@BATCHED
def test_a_burst_across_many_batches_is_answered_in_full(servers, transport):
    queries = []
    for qid in range(3000):
        query = make_query("chat.infer.example.com",  # 50 subnets: cached after the first
                           ecs=f"{(qid % 50) * 4 + 1}.2.3.0/24")
        query.id = qid
        queries.append(query.to_wire())
    replies = bulk_udp(servers[transport].addresses[0], queries, window=300)
    assert len(replies) >= 2990  # loopback may drop a handful when the window overflows
    for qid in list(replies)[:200]:
        response = dns.message.from_wire(replies[qid])
        assert response.id == qid and response.answer


@BATCHED
def test_a_datagram_longer_than_a_slot_is_dropped_and_service_goes_on(servers, transport):
    address = servers[transport].addresses[0]
    big = make_query("chat.infer.example.com").to_wire() + b"\x00" * (mmsg.SLOT_SIZE + 10)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(big, address)
    assert ask_wire(address, big, timeout=0.5) is None
    assert ask_wire(address, make_query("chat.infer.example.com").to_wire()) is not None


@BATCHED
def test_unanswered_datagrams_inside_a_batch_leave_the_others_intact(servers, transport):
    """Responses (QR set) and short junk get no answer; the queries between them in the
    same batches still get their own answers, each to its own sender."""
    address = servers[transport].addresses[0]
    senders = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
    try:
        expected = {}
        for qid in range(400):
            sock = senders[qid % 4]
            if qid % 3 == 1:
                sock.sendto(b"\x12" if qid % 2 else b"\x00\x01\x80" + b"\x00" * 9, address)
                continue
            query = make_query("chat.infer.example.com", ecs=f"{qid % 5 + 1}.2.3.0/24")
            query.id = qid
            sock.sendto(query.to_wire(), address)
            expected[qid] = qid % 4
        got = {}
        for index, sock in enumerate(senders):
            sock.settimeout(1.0)
            try:
                while True:
                    response = dns.message.from_wire(sock.recv(4096))
                    assert expected[response.id] == index  # to the sender that asked
                    assert response.question[0].name.to_text() == "chat.infer.example.com."
                    got[response.id] = index
            except TimeoutError:
                pass
        assert len(got) >= len(expected) - 5
    finally:
        for sock in senders:
            sock.close()


def test_one_wakeup_drains_up_to_four_batches():
    """Datagrams that arrive while a batch is answered are read in the same reader callback
    (no trip through the event loop), at most 4 batches so one busy socket cannot starve
    the loop's other work."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        server.setblocking(False)
        client.bind(("127.0.0.1", 0))
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        endpoint = MmsgEndpoint(server, lambda: lambda data, peer: b"re:" + data,
                                lambda data, host: None)
        per_call = 4 * mmsg.SLOTS
        for n in range(per_call + 44):
            client.sendto(n.to_bytes(2, "big") + b"q", server.getsockname())
        endpoint.readable()
        client.settimeout(0.5)
        first = [client.recv(64) for _ in range(per_call)]
        assert first == [b"re:" + n.to_bytes(2, "big") + b"q" for n in range(per_call)]
        client.settimeout(0.05)
        with pytest.raises(TimeoutError):
            client.recv(64)  # the rest waits for the next callback
        endpoint.readable()
        client.settimeout(0.5)
        assert len([client.recv(64) for _ in range(44)]) == 44
    finally:
        server.close()
        client.close()
