"""A random-subnet flood from one source under enforced response rate limiting: the
flood's queries are refused before they are answered (they cost no answers), and another
client's queries are all answered, correctly, while it lasts. The latency figure (p99 of
the other clients at 2,000 qps beside a 50k qps flood) is bench/dns_flood.py's."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from dns_helpers import make_query

from director.dns.app import DnsApp
from director.dns.ratelimit import RrlMode
from director.dns.server import ServerConfig, ServerThread
from director.dns.snapshot_source import StaticSnapshotSource

FLOOD = """
import os, random, socket, sys, time
port, count, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
base = bytes.fromhex(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("127.0.0.1", 0))
rng = random.Random(1)
start = time.monotonic()
for sent in range(count):
    if sent % 250 == 0:
        ahead = start + sent / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    packet = rng.randbytes(2) + base[2:-3] + rng.randbytes(3)
    try:
        sock.sendto(packet, ("127.0.0.1", port))
    except OSError:
        pass
print(f"{count / (time.monotonic() - start):.0f}")
"""


def ask_from(sock: socket.socket, address: tuple[str, int], query: bytes,
             attempts: int = 3) -> tuple[bytes | None, int]:
    """The reply (or None) and how many sends it took, waiting up to a second each."""
    for attempt in range(1, attempts + 1):
        sock.sendto(query, address)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                reply = sock.recv(4096)
            except TimeoutError:
                break
            if reply[:2] == query[:2]:
                return reply, attempt
    return None, attempts


def test_a_flood_from_one_source_costs_no_answers_and_others_are_answered(
        example_policy, geolite2) -> None:
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource(), rrl_mode=RrlMode.ENFORCE,
                 rrl_rate=20)
    flood_query = make_query("chat.infer.example.com", ecs="10.1.2.0/24").to_wire()
    config = ServerConfig(listen=(("127.0.0.1", 0),))
    with ServerThread(app, config) as server:
        address = server.addresses[0]
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, str(address[1]), "100000", "50000", flood_query.hex()],
            stdout=subprocess.PIPE, text=True)
        time.sleep(0.2)  # the flood is on
        started = time.monotonic()
        asked = answered = retried = 0
        # the other clients: 40 resolvers in 40 /24s, each well under the rate
        others = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(40)]
        for n, other in enumerate(others):
            other.bind((f"127.0.{10 + n}.1", 0))
        try:
            while flood.poll() is None and asked < 400:
                other = others[asked % len(others)]
                query = make_query("chat.infer.example.com", ecs="81.2.69.0/24",
                                   qid=asked).to_wire()
                reply, attempts = ask_from(other, address, query)
                asked += 1
                retried += attempts > 1
                if reply is not None:
                    answered += 1
                    assert reply == app.respond_full(query, other.getsockname()[0])
                time.sleep(0.005)
        finally:
            for other in others:
                other.close()
        flood_rate = float(flood.communicate(timeout=30)[0])
        elapsed = time.monotonic() - started
    assert asked >= 100 and answered == asked, (asked, answered, retried)
    assert flood_rate > 20_000  # it was a flood
    limited = app.stats.rrl["dropped"] + app.stats.rrl["slipped"]
    assert app.stats.rrl["slipped"] >= limited // 2 - 1
    # what the flood got answered is its burst and the refill while it lasted, nothing more;
    # the rest was refused before any answer was computed
    answers = sum(app.stats.counts)
    assert answers <= asked * 3 + 20 + 20 * (elapsed + 1), (answers, limited)
    assert limited > 50_000, limited


def test_log_only_is_the_default_and_answers_everything(example_policy, geolite2) -> None:
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    assert app.rrl is not None and app.rrl.mode is RrlMode.LOG_ONLY
    queries = [make_query("chat.infer.example.com", ecs="81.2.69.0/24", qid=i).to_wire()
               for i in range(100)]
    with (ServerThread(app, ServerConfig(listen=(("127.0.0.1", 0),))) as server,
          socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock):
        replies = [ask_from(sock, server.addresses[0], query)[0] for query in queries]
    assert all(reply is not None and not reply[2] & 0x02 for reply in replies)
    assert app.stats.rrl["would-limit"] >= 100 - 20 - 5
