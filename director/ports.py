"""Free loopback ports for the processes ``director up``, tests and benchmarks start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port free on ``host`` right now for ``kind`` (TCP by default, ``SOCK_DGRAM`` for
    UDP); whoever asked binds it a moment later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
