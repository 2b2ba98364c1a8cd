"""Metrics over HTTP and several worker processes sharing the port (SO_REUSEPORT)."""

from __future__ import annotations

import urllib.request

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
            import time
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
