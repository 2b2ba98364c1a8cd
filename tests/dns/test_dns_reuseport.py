"""The reuseport program steers real datagrams: ECS queries by client subnet, others by
source network."""

from __future__ import annotations

import select
import socket

import dns.edns
import dns.message
import pytest

from director.dns.transports.reuseport import NAME_LABELS, assemble, steer_by_subnet


def _group(size: int, family: int = socket.AF_INET) -> list[socket.socket]:
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    sockets: list[socket.socket] = []
    port = 0
    for _ in range(size):
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((host, port))
        port = sock.getsockname()[1]
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


@pytest.fixture
def group(request: pytest.FixtureRequest):
    size, family = getattr(request, "param", (3, socket.AF_INET))
    sockets = _group(size, family)
    yield sockets
    for sock in sockets:
        sock.close()


def _deliver(sockets: list[socket.socket], datagrams: list[bytes]) -> list[int | None]:
    """Send each datagram (its first two bytes unique) from one client socket; the index of
    the group socket that received each, or None for one that never arrived."""
    with socket.socket(sockets[0].family, socket.SOCK_DGRAM) as client:
        for datagram in datagrams:
            client.sendto(datagram, sockets[0].getsockname())
    where = _receive(sockets, len(datagrams))
    return [where.get(d[:2]) for d in datagrams]


def _receive(sockets: list[socket.socket], expected: int) -> dict[bytes, int]:
    """Read the group until ``expected`` datagrams came (or a second passes without one):
    each datagram's first two bytes -> the index of the socket that got it."""
    where: dict[bytes, int] = {}
    while len(where) < expected:
        ready, _, _ = select.select(sockets, [], [], 1.0)
        if not ready:
            break
        for sock in ready:
            while True:
                try:
                    got = sock.recv(4096)
                except BlockingIOError:
                    break
                where[got[:2]] = sockets.index(sock)
    return where


def _query(ident: int, name: str = "chat.infer.example.com", subnet: str | None = None,
           source: int = 24) -> bytes:
    options = [] if subnet is None else [dns.edns.ECSOption(subnet, source)]
    query = dns.message.make_query(name, "A", use_edns=0, payload=1232, options=options)
    query.id = ident
    return query.to_wire()


def test_without_the_program_one_peer_lands_on_one_socket(group) -> None:
    """The kernel's default, which the program replaces: the peer's address and port."""
    landed = _deliver(group, [_query(i) for i in range(300)])
    assert len(set(landed)) == 1 and None not in landed


def _deliver_from(sockets: list[socket.socket], sources: list[str]) -> dict[str, set[int]]:
    """Three queries from each source address; the group sockets each source reached."""
    for n, source in enumerate(sources):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.bind((source, 0))
            for k in range(3):
                client.sendto(_query(n * 4 + k), sockets[0].getsockname())
    reached: dict[str, set[int]] = {}
    for ident, index in _receive(sockets, len(sources) * 3).items():
        reached.setdefault(sources[int.from_bytes(ident, "big") // 4], set()).add(index)
    return reached


def test_queries_without_ecs_are_steered_by_source_slash24(group) -> None:
    """A source network is answered by one worker (its rate limit bucket and its cached
    answers live there), and many networks spread over every worker."""
    assert steer_by_subnet(group[0], len(group))
    sources = [f"127.0.{i}.{host}" for i in range(1, 61) for host in (1, 200)]
    reached = _deliver_from(group, sources)
    assert set(reached) == set(sources)
    per_network: dict[str, set[int]] = {}
    for source, indices in reached.items():
        per_network.setdefault(source.rsplit(".", 1)[0], set()).update(indices)
    assert all(len(indices) == 1 for indices in per_network.values()), per_network
    used = [sum(index in v for v in per_network.values()) for index in range(len(group))]
    assert all(count >= 8 for count in used), used  # 60 networks over 3 sockets


def test_an_ecs_subnet_always_lands_on_the_same_socket(group) -> None:
    assert steer_by_subnet(group[0], len(group))
    subnets = [f"{10 + i % 200}.{i * 7 % 256}.{i % 5}.0" for i in range(200)]
    datagrams = [_query(n * 1000 + i, subnet=subnet)
                 for n in range(3) for i, subnet in enumerate(subnets)]
    landed = _deliver(group, datagrams)
    assert None not in landed
    by_subnet: dict[str, set[int | None]] = {}
    for datagram, index in zip(datagrams, landed, strict=True):
        by_subnet.setdefault(subnets[int.from_bytes(datagram[:2], "big") % 1000], set()).add(index)
    assert all(len(indices) == 1 for indices in by_subnet.values())
    sockets_used = [sum(index in v for v in by_subnet.values()) for index in range(len(group))]
    assert all(used >= 30 for used in sockets_used), sockets_used  # 200 subnets, 3 sockets


def test_subnets_of_one_slash16_share_a_socket(group) -> None:
    assert steer_by_subnet(group[0], len(group))
    for first, second in (("81.2.69.0", "81.2.200.0"), ("8.8.8.0", "8.8.4.0")):
        landed = _deliver(group, [_query(1, subnet=first), _query(2, subnet=second)])
        assert landed[0] == landed[1] is not None


@pytest.mark.parametrize("group", [(2, socket.AF_INET6)], indirect=True)
def test_ipv6_ecs_subnets_are_steered_by_their_slash32(group) -> None:
    assert steer_by_subnet(group[0], len(group))
    subnets = [f"2001:{i:x}:{j:x}::" for i in range(1, 41) for j in (1, 2)]
    datagrams = [_query(n * 1000 + i, subnet=s, source=56)
                 for n in range(2) for i, s in enumerate(subnets)]
    landed = _deliver(group, datagrams)
    per_slash32: dict[str, set[int | None]] = {}
    for datagram, index in zip(datagrams, landed, strict=True):
        subnet = subnets[int.from_bytes(datagram[:2], "big") % 1000]
        per_slash32.setdefault(subnet.rsplit(":", 3)[0], set()).add(index)
    assert None not in landed
    assert all(len(indices) == 1 for indices in per_slash32.values())
    assert {i for v in per_slash32.values() for i in v} == {0, 1}


def test_odd_datagrams_are_still_delivered(group) -> None:
    """Short, garbage, compressed-name, long-name and narrow-ECS datagrams: each reaches
    some socket (the program never drops)."""
    assert steer_by_subnet(group[0], len(group))
    long_name = ".".join(["a"] * (NAME_LABELS + 5)) + ".infer.example.com"
    datagrams = [b"\x00\x01", b"\x00\x02" + bytes(range(40)),
                 b"\x00\x03" + b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x01\xc0\x0c",
                 _query(4, long_name, subnet="81.2.69.0"),
                 _query(5, subnet="81.2.0.0", source=8),
                 _query(6, subnet="81.2.69.0", source=0)]
    assert None not in _deliver(group, datagrams)


def test_a_socket_without_reuseport_refuses_the_program() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        assert steer_by_subnet(sock, 2) is False


def test_the_program_assembles_for_any_worker_count() -> None:
    for workers in (1, 2, 7, 64):
        assert len(assemble(workers)) % 8 == 0
