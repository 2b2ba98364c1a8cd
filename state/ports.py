"""Free loopback ports for the processes ``director up``, tests and benchmarks start."""

from __future__ import annotations

import ipaddress
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


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``"127.0.0.1:8080"`` or ``"[::1]:8080"`` -> host and port; with ``default_port`` a
    bare host too (``"10.0.0.5"``, ``"::1"``, ``"[::1]"``). The one listen-address grammar
    of every command; raises ``ValueError`` saying what was expected."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    bare = not sep or "]" in port or (":" in host and not host.startswith("["))
    if bare and default_port is not None:
        host, port = text, str(default_port)
    host = host.strip("[]")
    if (not sep and default_port is None) or not host or not port.isdigit() \
            or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (IPv6 as [::1]:8080), got {text!r}")
    return host, int(port)


def hostport(address: tuple[str, int]) -> str:
    """``("::1", 53)`` -> ``"[::1]:53"``; ``("127.0.0.1", 53)`` -> ``"127.0.0.1:53"``."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
        if _claim(host, port):
            return port
    return _kernel_port(host)


def is_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound for both TCP and UDP (a TCP port in
    TIME_WAIT counts as taken)."""
    return all(bind_error(host, port, kind, reuse_addr=False) is None
               for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM))


def bind_error(host: str, port: int, kind: int = socket.SOCK_STREAM,
               reuse_addr: bool = True) -> str | None:
    """Why a server could not bind ``host:port`` now (``None`` if it could). TCP is tried
    with ``SO_REUSEADDR`` unless told not to, as servers set it, so connections in
    TIME_WAIT do not count."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as sock:
        if kind == socket.SOCK_STREAM and reuse_addr:
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
        if _claim(host, port):
            return port
    raise OSError(f"no port free for both TCP and UDP on {host}")


def _claim(host: str, port: int) -> bool:
    if port in _handed_out or not is_free(host, port):
        return False
    _handed_out.add(port)
    return True


def is_loopback(host: str) -> bool:
    """True for loopback addresses (127.0.0.0/8, ::1) and the name ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
