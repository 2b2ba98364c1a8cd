"""Answer datagrams one by one with ``sendto``: the event loop's share of UDP work (what a
reader thread hands over, and the whole of it where ``recvmmsg`` is missing)."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from director.dns.app import DnsApp


def answer_all(app: DnsApp, sock: socket.socket, datagrams: Iterable[tuple[bytes, tuple]]) -> None:
    """Answer each ``(datagram, peer address)`` through ``app.udp_responder()``, SERVFAIL
    where that raises; a send that fails is like a datagram lost on the way."""
    respond = app.udp_responder()
    sendto = sock.sendto
    for data, addr in datagrams:
        try:
            response = respond(data, addr)
        except Exception:
            response = app.failed(data, addr[0])
        if response is not None:
            try:  # noqa: SIM105 (hot path: cheaper than contextlib.suppress)
                sendto(response, socket.MSG_DONTWAIT, addr)
            except OSError:
                pass  # socket buffer full, peer unreachable, or socket closed
