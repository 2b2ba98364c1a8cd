"""Metrics over HTTP and several worker processes sharing the port (SO_REUSEPORT)."""

from __future__ import annotations

import time
import urllib.request

import dns.exception
import dns.message
import pytest
from dns_helpers import ServerProcess, a_addresses, ask, bulk_udp, make_query


def _scrape(server: ServerProcess) -> dict[str, float]:
    assert server.metrics is not None
    host, port = server.metrics
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


@pytest.mark.parametrize("workers", [1, 2])
def test_metrics_count_queries_by_service_region_and_reason(workers):
    with ServerProcess("--metrics", "127.0.0.1:0", "--workers", str(workers)) as server:
        queries = [make_query("chat.infer.example.com", ecs="8.8.8.0/24", qid=i).to_wire()
                   for i in range(200)]
        queries += [make_query("nope.infer.example.com", qid=1000 + i).to_wire()
                    for i in range(50)]
        assert len(bulk_udp(server.address, queries)) == 250
        assert a_addresses(ask(server.address, make_query("chat.infer.example.com",
                                                          ecs="2.2.2.0/24"), tcp=True)) \
            == {"127.0.3.1"}
        if workers > 1:
            time.sleep(1.5)  # workers report every second
        values = _scrape(server)
    chat = ('director_dns_queries_total{qtype="A",rcode="NOERROR",reason="primary",'
            'region="us-east",service="chat.infer.example.com"}')
    nx = ('director_dns_queries_total{qtype="A",rcode="NXDOMAIN",reason="none",region="none",'
          'service="none"}')
    assert values[chat] == 200
    assert values[nx] == 50
    hits = values["director_dns_cache_hits_total"]
    misses = values["director_dns_cache_misses_total"]
    assert hits + misses >= 250 and hits > misses
    assert values["director_dns_decision_seconds_count"] >= 1
    assert values['director_engine_plugin_seconds_count{plugin="residency",stage="filter"}'] >= 1


def test_engine_plugin_timings_add_up_over_workers():
    from prometheus_client import CollectorRegistry, generate_latest

    from director.dns.metrics import DnsCollector, DnsStats, merge

    workers = [DnsStats(), DnsStats()]
    for stats, seconds in zip(workers, (3e-6, 2e-4), strict=True):
        for _ in range(3):
            stats.plugin_timings.observe("scorer", "geo", seconds)
    workers[1].plugin_timings.observe("filter", "health", 1e-6)
    registry = CollectorRegistry()
    registry.register(DnsCollector(lambda: merge(stats.snapshot() for stats in workers)))
    text = generate_latest(registry).decode()
    assert 'director_engine_plugin_seconds_count{plugin="geo",stage="scorer"} 6.0' in text
    assert ('director_engine_plugin_seconds_bucket{le="5e-06",plugin="geo",stage="scorer"} 3.0'
            in text)
    assert 'director_engine_plugin_seconds_count{plugin="health",stage="filter"} 1.0' in text


def test_two_workers_answer_udp_and_tcp():
    with ServerProcess("--workers", "2") as server:
        for tcp in (False, True):
            for subnet, address in (("8.8.8.0/24", "127.0.1.1"), ("2.2.2.0/24", "127.0.3.1")):
                response = ask(server.address, make_query("chat.infer.example.com", ecs=subnet),
                               tcp=tcp)
                assert a_addresses(response) == {address}
        assert server.proc is not None
        pid = server.proc.pid
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            assert len(children.read().split()) == 2


def test_a_dead_worker_is_replaced():
    import os
    import signal
    import time

    with ServerProcess("--workers", "2") as server:
        assert server.proc is not None
        pid = server.proc.pid

        def workers() -> list[int]:
            with open(f"/proc/{pid}/task/{pid}/children") as children:
                return [int(p) for p in children.read().split()]

        first = workers()
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = workers()
            if len(now) == 2 and first[0] not in now:
                break
            time.sleep(0.1)
        assert len(workers()) == 2 and first[0] not in workers()
        query = make_query("chat.infer.example.com", ecs="2.2.2.0/24")
        assert a_addresses(ask_as_a_resolver(server.address, query)) == {"127.0.3.1"}
        for third in range(20):  # both sockets of the port answer (steered by subnet)
            query = make_query("chat.infer.example.com", ecs=f"2.2.{third}.0/24")
            assert a_addresses(ask_as_a_resolver(server.address, query))


def ask_as_a_resolver(address: tuple[str, int], query: dns.message.Message) -> dns.message.Message:
    """Ask over UDP and ask again once after 3 s without an answer, as a resolver does: the
    test machine leaves processes without a CPU for up to a second at a time. A socket of a
    worker that does not read still fails: a subnet always reaches the same socket."""
    try:
        return ask(address, query)
    except dns.exception.Timeout:
        return ask(address, query)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sighup_reloads_the_policy_file_and_keeps_the_last_good_one(tmp_path, workers):
    import shutil
    import signal
    import time

    from dns_helpers import ROOT

    shutil.copytree(ROOT / "policies" / "examples", tmp_path / "policy")
    path = tmp_path / "policy" / "global.dp"
    original = path.read_text()
    query = make_query("chat.infer.example.com", ecs="2.2.2.0/24")

    def answer_becomes(expected: set[str]) -> bool:
        """True once 20 answers in a row (so every worker's) are ``expected``."""
        deadline, streak = time.monotonic() + 30, 0
        while time.monotonic() < deadline and streak < 20:
            answered = a_addresses(ask(server.address, query, timeout=10))
            streak = streak + 1 if answered == expected else 0
            time.sleep(0.02)
        return streak >= 20

    with ServerProcess("--workers", workers, policy=path) as server:
        assert a_addresses(ask(server.address, query, timeout=10)) == {"127.0.3.1"}
        path.write_text(original.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9"))
        server.proc.send_signal(signal.SIGHUP)
        assert answer_becomes({"127.0.3.9"})
        path.write_text("zone {")
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)  # let the failed reload happen; the last good policy keeps serving
        for _ in range(20):
            assert a_addresses(ask(server.address, query, timeout=10)) == {"127.0.3.9"}
        assert server.alive()


@pytest.mark.parametrize("workers", [1, 2])
def test_state_refresher_metrics_are_exported_per_worker(workers, valkey):
    """A server following the shared state exports its refreshers' families too."""
    with ServerProcess("--metrics", "127.0.0.1:0", "--workers", str(workers),
                       "--redis", valkey.url) as server:
        deadline = time.monotonic() + 10
        while True:
            values = _scrape(server)
            reachable = {worker: values.get(f'director_state_reachable{{worker="{worker}"}}')
                         for worker in map(str, range(workers))}
            if all(value == 1.0 for value in reachable.values()):
                break
            assert time.monotonic() < deadline, reachable
            time.sleep(0.3)
    for worker in map(str, range(workers)):
        assert f'director_state_snapshot_version{{worker="{worker}"}}' in values
        assert values[f'director_state_read_errors_total{{worker="{worker}"}}'] == 0
