"""TCP transport: pipelining, frame limits, trickling and stuck clients never stall others,
connection caps per client /24 and in total."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import dns.message
import pytest
from dns_helpers import a_addresses, ask, make_query

from director.dns.app import DnsApp
from director.dns.metrics import DnsCollector
from director.dns.server import ServerConfig, ServerThread

GOOD = make_query("chat.infer.example.com", ecs="8.8.8.0/24")


def _connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address, timeout=3)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    head = _read_exact(sock, 2)
    return _read_exact(sock, struct.unpack("!H", head)[0])


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _closed(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def test_pipelined_queries_are_answered_in_order(address):
    names = ["chat", "embed", "sovereign", "nope", "ns1"] * 10
    frames = b""
    for i, name in enumerate(names):
        wire = make_query(f"{name}.infer.example.com", qid=i).to_wire()
        frames += struct.pack("!H", len(wire)) + wire
    with _connect(address) as sock:
        sock.sendall(frames)
        ids = [dns.message.from_wire(_read_frame(sock)).id for _ in names]
    assert ids == list(range(len(names)))


def test_query_split_across_many_segments(address):
    wire = GOOD.to_wire()
    frame = struct.pack("!H", len(wire)) + wire
    with _connect(address) as sock:
        for byte in frame:
            sock.send(bytes((byte,)))
            time.sleep(0.002)
        assert a_addresses(dns.message.from_wire(_read_frame(sock))) == {"127.0.1.1"}


def test_oversized_frame_closes_the_connection(address):
    with _connect(address) as sock:
        sock.sendall(b"\xff\xff" + b"\x00" * 1000)
        assert _closed(sock, 2.0)
    assert a_addresses(ask(address, GOOD, tcp=True)) == {"127.0.1.1"}


def test_zero_length_frame_closes_the_connection(address):
    with _connect(address) as sock:
        sock.sendall(b"\x00\x00")
        assert _closed(sock, 2.0)


def test_trickling_client_never_stalls_others_and_is_dropped(address):
    """One byte every 100 ms never completes a query: others are answered meanwhile, and
    the trickler is closed after the idle timeout (1 s in these tests)."""
    stop = threading.Event()
    closed_after: list[float] = []

    def trickle() -> None:
        with _connect(address) as sock:
            start = time.monotonic()
            try:
                sock.send(b"\x00")
                while not stop.is_set():
                    sock.send(b"\x10")  # never-ending: a 4 KiB frame, a byte at a time
                    time.sleep(0.1)
            except OSError:
                closed_after.append(time.monotonic() - start)

    tricklers = [threading.Thread(target=trickle) for _ in range(5)]
    for thread in tricklers:
        thread.start()
    time.sleep(0.2)
    for _ in range(20):
        begin = time.monotonic()
        assert a_addresses(ask(address, GOOD, tcp=True, timeout=1)) == {"127.0.1.1"}
        assert a_addresses(ask(address, GOOD, timeout=1)) == {"127.0.1.1"}
        assert time.monotonic() - begin < 1.0
    for thread in tricklers:
        thread.join(5)
    stop.set()
    assert len(closed_after) == 5
    assert all(0.8 <= t <= 4.0 for t in closed_after), closed_after


def test_idle_connection_is_closed(address):
    with _connect(address) as sock:
        assert _closed(sock, 3.0)


def test_client_that_never_reads_does_not_stall_others(address):
    wire = make_query("infer.example.com", "NS").to_wire()
    frame = struct.pack("!H", len(wire)) + wire
    with _connect(address) as greedy:
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.settimeout(0.5)
        try:
            for _ in range(2000):
                greedy.send(frame * 20)
        except (TimeoutError, OSError):
            pass  # the server stopped reading from us: fine
        for _ in range(5):
            assert a_addresses(ask(address, GOOD, tcp=True, timeout=1)) == {"127.0.1.1"}


# -- connection caps: per client /24 and in total ----------------------------------------


def _connect_from(source: str, address: tuple[str, int]) -> socket.socket:
    """A TCP connection to ``address`` from the loopback address ``source``
    (127.0.0.0/8 is all loopback, so each /24 in it is another client network)."""
    return socket.create_connection(address, timeout=3, source_address=(source, 0))


def _answered(sock: socket.socket) -> bool:
    wire = GOOD.to_wire()
    try:
        sock.settimeout(3)
        sock.sendall(struct.pack("!H", len(wire)) + wire)
        return a_addresses(dns.message.from_wire(_read_frame(sock))) == {"127.0.1.1"}
    except (EOFError, OSError):
        return False


@pytest.fixture
def capped(app: DnsApp) -> Iterator[tuple[tuple[str, int], DnsApp]]:
    config = ServerConfig(listen=(("127.0.0.1", 0),), tcp_idle_timeout=10.0,
                          tcp_max_connections=5, tcp_max_per_network=3)
    with ServerThread(app, config) as running:
        yield running.addresses[0], app


def test_a_client_network_gets_at_most_its_cap_of_connections(capped):
    address, app = capped
    held = [_connect_from(f"127.0.5.{i}", address) for i in (1, 2, 3)]
    try:
        assert all(_answered(sock) for sock in held)
        with _connect_from("127.0.5.4", address) as over:  # a fourth from 127.0.5.0/24
            assert _closed(over, 2.0)
        assert app.stats.tcp_refused == {"per-network": 1}
        assert _refused_metric(app) == {"per-network": 1.0}
        with _connect_from("127.0.6.1", address) as other:  # another /24 is not limited
            assert _answered(other)
        held.pop().close()  # one of the three leaves: room for another
        deadline = time.monotonic() + 5
        while True:
            with _connect_from("127.0.5.9", address) as again:
                if _answered(again):
                    break
            assert time.monotonic() < deadline, "the closed connection was never uncounted"
            time.sleep(0.05)
    finally:
        for sock in held:
            sock.close()


def test_connections_over_the_total_cap_are_closed_at_once(capped):
    address, app = capped
    held = [_connect_from(source, address) for source in
            ("127.0.5.1", "127.0.5.2", "127.0.6.1", "127.0.6.2", "127.0.7.1")]
    try:
        assert all(_answered(sock) for sock in held)
        with _connect_from("127.0.8.1", address) as over:
            assert _closed(over, 2.0)
        assert app.stats.tcp_refused == {"total": 1}
        assert a_addresses(ask(address, GOOD, timeout=1)) == {"127.0.1.1"}  # UDP still
    finally:
        for sock in held:
            sock.close()


def _refused_metric(app: DnsApp) -> dict[str, float]:
    (family,) = [f for f in DnsCollector(app.stats.snapshot).collect()
                 if f.name == "director_dns_tcp_refused"]
    return {sample.labels["reason"]: sample.value for sample in family.samples}
