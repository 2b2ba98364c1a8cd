"""Binding a DNS listen address: a UDP and a TCP socket on the same address and port.

IPv4 and IPv6 (v6-only sockets), port 0 picks a free port (the same for UDP and TCP),
``reuse_port`` sets SO_REUSEPORT for ``--workers``; UDP sockets get a 4 MiB receive buffer
(capped by ``net.core.rmem_max``) to absorb bursts.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass, field

from state.ports import hostport, parse_hostport


@dataclass
class BoundSockets:
    """A UDP and a TCP socket bound to the same address and port."""

    udp: socket.socket
    tcp: socket.socket
    address: tuple[str, int] = field(init=False)

    def __post_init__(self) -> None:
        host, port = self.udp.getsockname()[:2]
        self.address = (host, port)


def parse_listen(listen: str) -> tuple[tuple[str, int], ...]:
    """'127.0.0.1:5353,[::1]:5353' -> (('127.0.0.1', 5353), ('::1', 5353))."""
    out = []
    for item in listen.split(","):
        try:
            out.append(parse_hostport(item))
        except ValueError as exc:
            raise ValueError(f"listen address {item.strip()!r}: {exc}") from None
    return tuple(out)


def bind_sockets(host: str, port: int, reuse_port: bool = False,
                 attempts: int = 20) -> BoundSockets:
    """Bind UDP and TCP on ``host:port``; with port 0, one free port for both."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(attempts):
        udp = _socket(family, socket.SOCK_DGRAM, reuse_port)
        try:
            udp.bind((host, port))
        except OSError as exc:
            udp.close()
            raise _bind_error(exc, "UDP", host, port) from None
        bound_port = udp.getsockname()[1]
        tcp = _socket(family, socket.SOCK_STREAM, reuse_port)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((host, bound_port))
        except OSError as exc:
            udp.close()
            tcp.close()
            if port == 0 and exc.errno == errno.EADDRINUSE:
                continue
            raise _bind_error(exc, "TCP", host, bound_port) from None
        tcp.listen(1024)
        return BoundSockets(udp, tcp)
    raise OSError(errno.EADDRINUSE, f"no free port for UDP and TCP on {host}")


def _bind_error(exc: OSError, protocol: str, host: str, port: int) -> OSError:
    return OSError(exc.errno, f"cannot bind DNS {protocol} {hostport((host, port))}: "
                   f"{exc.strerror}")


def _socket(family: int, kind: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(family, kind)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if kind == socket.SOCK_DGRAM:
        with contextlib.suppress(OSError):  # absorb bursts (capped by net.core.rmem_max)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setblocking(False)
    return sock
