"""UDP read by the event loop without ``recvmmsg``: up to ``batch`` datagrams per wake-up
with ``recvfrom``, each answered with ``sendto`` (``udp_answer``). The stdlib's datagram
transport reads one datagram per wake-up into a 256 KiB buffer; this is the fallback where
``mmsg`` is not available."""

from __future__ import annotations

import socket

from director.dns.app import DnsApp
from director.dns.transports.udp_answer import answer_all

UDP_READ_SIZE = 4096


class UdpEndpoint:
    """Answers what is waiting on ``sock`` when the loop says it is readable."""

    def __init__(self, sock: socket.socket, app: DnsApp, batch: int) -> None:
        self.sock = sock
        self.app = app
        self.batch = batch

    def readable(self) -> None:
        recvfrom = self.sock.recvfrom
        received = []
        for _ in range(self.batch):
            try:
                received.append(recvfrom(UDP_READ_SIZE))
            except OSError:  # nothing more waiting (BlockingIOError), or a failed read
                break
        answer_all(self.app, self.sock, received)
