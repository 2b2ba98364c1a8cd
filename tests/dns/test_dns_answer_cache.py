"""The answer cache's bounds (``director.dns.answer_cache``): entries and bytes never pass
them, the bytes it counts cover what Python really allocates, a full cache drops its oldest
quarter, and answers through a tiny cache are still the full path's."""

from __future__ import annotations

import ipaddress
import os
import random
import tracemalloc

from dns_helpers import make_query

from director.dns.answer_cache import AnswerCache
from director.dns.app import DnsApp
from director.dns.fastpath import Template
from director.dns.snapshot_source import StaticSnapshotSource


def test_entries_and_bytes_stay_within_the_bounds() -> None:
    cache = AnswerCache(max_entries=5_000, max_bytes=400_000)
    rng = random.Random(1)
    for n in range(50_000):
        query, body = rng.randbytes(rng.randrange(30, 90)), rng.randbytes(rng.randrange(40, 400))
        host = f"192.0.2.{n % 250}" if n % 3 == 0 else None
        cache.put(cache.tcp if n % 5 == 0 else cache.udp, query, (body, 1), host)
        assert cache.entries <= 5_000 and cache.bytes <= 400_000
    held = sum(len(v) if v.__class__ is dict else 1
               for table in (cache.udp, cache.tcp) for v in table.values())
    assert held == cache.entries > 500 and cache.evicted == 50_000 - held


def test_counted_bytes_cover_what_python_allocates() -> None:
    cache = AnswerCache(max_entries=10**9, max_bytes=10**12)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(30_000):
            query, body = os.urandom(45), os.urandom(120)
            cache.put(cache.udp, query, (body, n % 40),
                      f"2001:db8::{n % 999:x}" if n % 4 == 0 else None)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.bytes >= allocated * 0.95, (cache.bytes, allocated)
    assert cache.bytes <= allocated * 1.6, (cache.bytes, allocated)


def test_a_full_cache_drops_its_oldest_quarter_not_everything() -> None:
    cache = AnswerCache(max_entries=1_000, max_bytes=10**9)
    queries = [n.to_bytes(4, "big") for n in range(1_001)]
    for query in queries:
        cache.put(cache.udp, query, (b"answer", 1))
    assert [q in cache.udp for q in queries] == [False] * 251 + [True] * 750
    assert cache.entries == 750 and cache.evicted == 251


def test_answers_through_a_tiny_cache_equal_the_full_path(example_policy, geolite2) -> None:
    app = DnsApp(example_policy, geolite2, StaticSnapshotSource())
    app.fast.cache.max_entries, app.fast.cache.max_bytes = 40, 12_000
    rng = random.Random(3)
    names = ["chat.infer.example.com", "embed.infer.example.com", "infer.example.com",
             "nope.infer.example.com"]
    for n in range(3_000):
        address = ipaddress.IPv4Address(rng.randrange(1 << 24, 224 << 24))
        subnet = str(ipaddress.ip_network((address, 24), strict=False))
        query = make_query(rng.choice(names), rng.choice(["A", "AAAA", "TXT"]),
                           ecs=subnet if n % 3 else None, qid=n & 0xFFFF).to_wire()
        host = f"127.0.{n % 7}.1"
        tcp = n % 11 == 0
        assert app.respond(query, host, tcp) == app.respond_full(query, host, tcp)
        cache = app.fast.cache
        assert cache.entries <= 40 and cache.bytes <= 12_000


def test_a_successor_keeps_the_templates_and_their_bytes_only() -> None:
    cache = AnswerCache(max_entries=1_000, max_bytes=10**9)
    for n in range(50):
        cache.put_template((n.to_bytes(4, "big"), 1), Template(b"h" * 10, b"t" * 30, 0))
        cache.put(cache.udp, n.to_bytes(4, "big"), (b"answer", 1))
    successor = cache.successor()
    assert successor.templates is cache.templates and not successor.udp and not successor.tcp
    assert successor.entries == 50
    assert successor.bytes == successor.template_bytes == cache.template_bytes < cache.bytes
    for n in range(2_000):  # evictions keep the counts right
        successor.put(successor.udp, n.to_bytes(8, "big"), (b"x", 2))
    held = len(successor.udp) + len(successor.templates)
    assert successor.entries == held <= 1_000
