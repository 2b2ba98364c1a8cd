"""Ports handed to ``director up``, tests and benchmarks: outside the kernel's ephemeral
range, free for TCP and UDP, never the same one twice."""

from __future__ import annotations

import socket

import pytest

from state.ports import ephemeral_range, free_port, is_free, parse_hostport


def test_ports_come_from_below_the_ephemeral_range_and_bind_for_tcp_and_udp():
    low, high = ephemeral_range()
    assert 1024 < low <= high
    for _ in range(20):
        port = free_port()
        assert port < low
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            with socket.socket(socket.AF_INET, kind) as sock:
                sock.bind(("127.0.0.1", port))


def test_no_port_is_handed_out_twice():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_port_taken_for_either_protocol_is_not_free():
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as holder:
            holder.bind(("127.0.0.1", 0))
            port = holder.getsockname()[1]
            assert not is_free("127.0.0.1", port)
        assert is_free("127.0.0.1", port)


def test_ipv6_loopback_ports_are_free_for_both_protocols():
    port = free_port("::1")
    assert is_free("::1", port)


@pytest.mark.parametrize(("text", "default", "expected"), [
    ("127.0.0.1:8080", None, ("127.0.0.1", 8080)),
    ("[::1]:53", None, ("::1", 53)),
    (" 127.0.1.2:0 ", None, ("127.0.1.2", 0)),
    ("10.0.0.5", 8080, ("10.0.0.5", 8080)),
    ("::1", 5353, ("::1", 5353)),
    ("[::1]", 9153, ("::1", 9153)),
    ("[::1]:9", 9153, ("::1", 9)),
])
def test_parse_hostport(text: str, default: int | None, expected: tuple[str, int]) -> None:
    assert parse_hostport(text, default) == expected


@pytest.mark.parametrize("text", ["8080", "host:", ":53", "host:http", "host:70000", ""])
def test_parse_hostport_refuses_what_is_not_an_address(text: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_hostport(text)
