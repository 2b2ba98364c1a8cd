"""The reuseport program spreads one peer's datagrams over every socket of the group."""

from __future__ import annotations

import select
import socket

from director.dns.reuseport import spread_evenly

DATAGRAMS = 400


def _group(size: int) -> list[socket.socket]:
    sockets: list[socket.socket] = []
    port = 0
    for _ in range(size):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind(("127.0.0.1", port))
        port = sock.getsockname()[1]
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def _received_per_socket(sockets: list[socket.socket]) -> list[int]:
    """Send DATAGRAMS datagrams from one client socket; count what each group socket got."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        for i in range(DATAGRAMS):
            client.sendto(i.to_bytes(2, "big"), sockets[0].getsockname())
        counts = [0] * len(sockets)
        while sum(counts) < DATAGRAMS:
            ready, _, _ = select.select(sockets, [], [], 2.0)
            assert ready, f"datagrams lost: got {counts}"
            for sock in ready:
                while True:
                    try:
                        sock.recv(64)
                    except BlockingIOError:
                        break
                    counts[sockets.index(sock)] += 1
    return counts


def test_without_the_program_one_peer_lands_on_one_socket() -> None:
    """The kernel's default: a hash of the peer's address and port picks the socket."""
    sockets = _group(2)
    try:
        assert sorted(_received_per_socket(sockets)) == [0, DATAGRAMS]
    finally:
        for sock in sockets:
            sock.close()


def test_with_the_program_one_peer_is_spread_over_every_socket() -> None:
    sockets = _group(3)
    try:
        assert spread_evenly(sockets[0], len(sockets))
        counts = _received_per_socket(sockets)
        # Binomial(400, 1/3) per socket: below 80 has a probability far under 1e-6.
        assert all(count >= 80 for count in counts), counts
    finally:
        for sock in sockets:
            sock.close()


def test_a_socket_without_reuseport_refuses_the_program() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        assert spread_evenly(sock, 2) is False
