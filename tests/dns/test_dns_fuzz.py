"""Bad input against a running server process: 100,000+ random and mutated packets, then a
good query still gets the right answer; truncated packets, compression loops, wrong counts
answered FORMERR or dropped; the process never dies."""

from __future__ import annotations

import contextlib
import random
import select
import socket
import struct
import time
import urllib.request

import dns.message
import dns.rcode
import pytest
from dns_helpers import ServerProcess, a_addresses, ask, ask_wire, make_query

GOOD = make_query("chat.infer.example.com", ecs="8.8.8.0/24")


@pytest.fixture(scope="module")
def process():
    with ServerProcess("--metrics", "127.0.0.1:0") as server:
        yield server


def _seeds() -> list[bytes]:
    seeds = [make_query(n, t, ecs=e).to_wire()
             for n in ("chat.infer.example.com", "infer.example.com", "x.infer.example.com")
             for t in ("A", "AAAA", "SOA", "TXT")
             for e in (None, "2.2.2.0/24", "2001:db8::/56")]
    seeds.append(make_query("infer.example.com", "NS", edns=False).to_wire())
    return seeds


def _mutate(rng: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    kind = rng.randrange(6)
    if kind == 0:  # flip bits
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del data[rng.randrange(len(data)):]
    elif kind == 2:  # insert junk
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 40))
    elif kind == 3:  # wrong counts
        struct.pack_into("!HHHH", data, 4, *(rng.choice((0, 1, 2, 255, 65535)) for _ in range(4)))
    elif kind == 4:  # random bytes over the header
        data[rng.randrange(12):12] = rng.randbytes(rng.randint(0, 12))
    else:  # overwrite a byte with a pointer
        at = rng.randrange(12, len(data))
        data[at:at + 2] = bytes((0xC0, rng.randrange(256)))
    return bytes(data)


def _packets(rng: random.Random, count: int) -> list[bytes]:
    seeds = _seeds()
    out = []
    for i in range(count):
        if i % 3 == 0:
            out.append(rng.randbytes(rng.choice((0, 1, 11, 12, 13, 17, 40, 300, 1500))))
        else:
            out.append(_mutate(rng, rng.choice(seeds)))
    return out


def _send_paced(address: tuple[str, int], packets: list[bytes], window: int = 300) -> int:
    """Send without waiting for each reply, but keep at most ``window`` replies owed (the
    server answers every packet of 12 bytes or more with QR clear), so the burst is
    processed rather than dropped by the kernel; bounded in time: returns how many were
    sent before the deadline."""
    deadline = time.monotonic() + 200
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        sock.setblocking(False)
        owed = 0
        for data in packets:
            if time.monotonic() > deadline:
                break
            sent += 1
            if len(data) >= 12 and not data[2] & 0x80:
                owed += 1
            with contextlib.suppress(OSError):
                sock.sendto(data, address)
            while owed > window and time.monotonic() < deadline:
                ready, _, _ = select.select([sock], [], [], 1.0)
                if not ready:
                    owed = window // 2  # some were lost: do not wait for them forever
                    break
                try:
                    while True:
                        sock.recv(65535)
                        owed -= 1
                except BlockingIOError:
                    pass
    return sent


def _handled(process: ServerProcess) -> float:
    return _metric(process, "director_dns_queries_total") + _metric(
        process, "director_dns_dropped_total")


def _wait_until_drained(process: ServerProcess, quiet_s: float = 2.0,
                        limit_s: float = 60.0, poll_s: float = 0.25) -> None:
    """Until the handled count has not moved for ``quiet_s`` (bounded by ``limit_s``): read
    every ``poll_s``, so the quiet time counts from its last move, not from the last of
    whole ``quiet_s`` blocks (the backlog drains in well under a block, which then cost two)."""
    deadline = time.monotonic() + limit_s
    last, moved = _handled(process), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        now = _handled(process)
        if now != last:
            last, moved = now, time.monotonic()
        elif time.monotonic() - moved >= quiet_s:
            return


def _metric(process: ServerProcess, name: str) -> float:
    assert process.metrics is not None
    host, port = process.metrics
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def test_hundred_thousand_bad_packets_then_a_good_query(process):
    rng = random.Random(1871)
    packets = _packets(rng, 100_000)
    before = _handled(process)
    assert _send_paced(process.address, packets) == len(packets)
    _wait_until_drained(process)  # the backlog handled, so later tests find an idle server
    assert process.alive()
    response = ask(process.address, GOOD)
    assert a_addresses(response) == {"127.0.1.1"}
    handled = _handled(process) - before
    assert handled >= 95_000  # paced: nearly every packet reached the server


HEADER = b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"  # ID 0x1234, one question
CRAFTED = {
    "pointer-loop-to-self": HEADER + b"\xc0\x0c\x00\x01\x00\x01",
    "pointer-forward": b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x14\x00\x01\x00\x01"
                       b"\x00\x00\x04chat\x00",
    "pointer-two-hop-loop": b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\xc0\x0e"
                            b"\x00\x01\x00\x01",
    "qdcount-too-high": b"\x12\x34\x00\x00\x00\x05" + HEADER[6:] + b"\x04chat\x00\x00\x01\x00\x01",
    "arcount-without-records": b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x03\x04chat\x00"
                               b"\x00\x01\x00\x01",
    "label-too-long": b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x50" + b"a" * 80
                      + b"\x00\x00\x01\x00\x01",
    "truncated-question": b"\x12\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04cha",
    "two-opt-records": make_query("chat.infer.example.com").to_wire()[:11] + b"\x02"
                       + make_query("chat.infer.example.com").to_wire()[12:]
                       + b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00",
}


@pytest.mark.parametrize("data", CRAFTED.values(), ids=CRAFTED.keys())
def test_crafted_bad_packets_get_formerr(process, data):
    reply = ask_wire(process.address, data)
    assert reply is not None
    assert reply[:2] == data[:2] and reply[2] & 0x80
    assert reply[3] & 0x0F == dns.rcode.FORMERR
    assert process.alive()


@pytest.mark.parametrize("length", range(0, 60, 3))
def test_every_truncation_of_a_query_is_answered_or_dropped(process, length):
    data = GOOD.to_wire()[:length]
    reply = ask_wire(process.address, data, timeout=0.3)
    if length < 12:
        assert reply is None
    elif reply is not None:
        assert dns.message.from_wire(reply).rcode() == dns.rcode.FORMERR
    assert process.alive()


def test_responses_are_never_answered(process):
    response = dns.message.make_response(GOOD).to_wire()
    assert ask_wire(process.address, response, timeout=0.3) is None
