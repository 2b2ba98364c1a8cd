"""Free loopback ports for the processes ``director up``, tests and benchmarks start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
ATTEMPTS = 200

_handed_out: set[int] = set()


def ephemeral_range() -> tuple[int, int]:
    """The range the kernel picks from for ``connect()`` and ``bind(port 0)``."""
    try:
        low, high = EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now for both TCP and UDP; whoever asked binds it a
    moment later.

    The port is taken from below the kernel's ephemeral range: a port the kernel picked
    with ``bind(0)`` can be given to an outgoing connection (a Redis client, a health
    probe) before the server binds it, and that connection then holds it for good. Ports
    already returned by this process are not returned again.
    """
    low, _high = ephemeral_range()
    if low - 1 <= LOWEST_PORT:
        return _kernel_port(host)
    for _ in range(ATTEMPTS):
        port = random.randint(LOWEST_PORT, low - 1)
        if port not in _handed_out and is_free(host, port):
            _handed_out.add(port)
            return port
    return _kernel_port(host)


def is_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound for both TCP and UDP."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(family, kind) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def bind_error(host: str, port: int, kind: int = socket.SOCK_STREAM) -> str | None:
    """Why a server could not bind ``host:port`` now (``None`` if it could). TCP is tried
    with ``SO_REUSEADDR``, as servers set it, so connections in TIME_WAIT do not count."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as sock:
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _kernel_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(ATTEMPTS):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out and is_free(host, port):
            _handed_out.add(port)
            return port
    raise OSError(f"no port free for both TCP and UDP on {host}")
