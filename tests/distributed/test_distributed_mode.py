"""Distributed mode: the system as separate processes on a real Redis server (the system's
``redis-server``, not the embedded Valkey), with two DNS instances sharing it. Only instance
A runs probe workers; a region that dies is seen through A's probes in both instances'
answers, and so is its recovery."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.edns
import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import pytest
import redis

from state.ports import free_port

POLICY = """\
zone infer.example.com {
    ttl 30s
    soa { mname ns1.infer.example.com; rname hostmaster.infer.example.com; refresh 1h;
          retry 10m; expire 14d; minimum 60s }
    ns ns1.infer.example.com 127.0.0.1
    ns ns2.infer.example.com 127.0.0.2
}
healthcheck gpu { path /health; expect 200; interval 1s; timeout 500ms; metrics /metrics }
healthcheck balancer { path /healthz; expect 200; interval 1s; timeout 500ms }
region eu-west {
    location 53.35 -6.26
    jurisdiction EU
    endpoints 127.0.41.1
    capacity 2 gpus x 3rps
    healthcheck balancer
    gpu euw-a { url http://127.0.41.11:8000; models sim-model; kind H100 }
}
region us-east {
    location 38.90 -77.04
    jurisdiction US
    endpoints 127.0.42.1
    capacity 2 gpus x 3rps
    healthcheck balancer
    gpu use-a { url http://127.0.42.11:8000; models sim-model; kind H100 }
}
service chat.infer.example.com {
    ttl 5s
    steer geo
    failover { fall 2; rise 2; interval 1s; timeout 500ms }
    all-down answer-nothing
}
"""
US_CLIENT = "8.8.8.0/24"  # US in GeoLite2 City 2018
EU_ADDRESS, US_ADDRESS = "127.0.41.1", "127.0.42.1"


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(dns.exception.DNSException, OSError, redis.RedisError):
            if predicate():
                return True
        time.sleep(0.2)
    return False


def answer(port: int) -> list[str]:
    query = dns.message.make_query("chat.infer.example.com", dns.rdatatype.A, use_edns=0,
                                   options=[dns.edns.ECSOption.from_text(US_CLIENT)])
    response = dns.query.udp(query, "127.0.0.1", port=port, timeout=1)
    return sorted(rr.address for rrset in response.answer for rr in rrset)


class Processes:
    """Named child processes, each in its own group, all stopped at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.running[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **(env or {})})
        log.close()

    def kill(self, name: str) -> None:
        process = self.running.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for process in self.running.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.running.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        self.running.clear()

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    process = subprocess.Popen([binary, "--bind", "127.0.0.1", "--port", str(port),
                                "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        assert wait_for(lambda: client.ping(), 10), "redis-server did not start"
        yield url
    finally:
        client.close()
        process.terminate()
        process.wait(10)


def director(*args: str) -> list[str]:
    return [sys.executable, "-m", "director", *args]


def test_two_dns_instances_on_one_redis_see_one_instances_probes(
    redis_server: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.dp"
    policy.write_text(POLICY)
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    dns_a, dns_b = free_port(), free_port()
    try:
        for gpu, host in (("euw-a", "127.0.41.11"), ("use-a", "127.0.42.11")):
            procs.start(gpu, [sys.executable, "-m", "regions.simulator", "--listen",
                              f"{host}:8000", "--name", gpu])
        for region, host in (("eu-west", EU_ADDRESS), ("us-east", US_ADDRESS)):
            procs.start(f"balancer-{region}", director(
                "region", "serve", "--policy", str(policy), "--region", region,
                "--listen", f"{host}:8080", "--admin-listen", f"{host}:0", "--redis",
                redis_server))
        procs.start("workers-a", director("workers", "--policy", str(policy), "--redis",
                                          redis_server, "--loglevel", "WARNING"),
                    env={"DIRECTOR_BALANCER_PORT": "8080"})
        for name, port in (("dns-a", dns_a), ("dns-b", dns_b)):
            procs.start(name, director("dns", "serve", "--policy", str(policy), "--listen",
                                       f"127.0.0.1:{port}", "--redis", redis_server,
                                       "--follow-policy",
                                       "--no-precompile"))  # one known subnet is asked

        both = (dns_a, dns_b)
        assert wait_for(lambda: all(answer(p) == [US_ADDRESS] for p in both), 60), (
            procs.log("dns-a") + procs.log("workers-a"))

        procs.kill("balancer-us-east")  # the region dies; only instance A probes it
        assert wait_for(lambda: all(answer(p) == [EU_ADDRESS] for p in both), 30), (
            procs.log("workers-a"))

        procs.start("balancer-us-east", director(
            "region", "serve", "--policy", str(policy), "--region", "us-east",
            "--listen", f"{US_ADDRESS}:8080", "--admin-listen", f"{US_ADDRESS}:0", "--redis",
            redis_server))
        assert wait_for(lambda: all(answer(p) == [US_ADDRESS] for p in both), 30), (
            procs.log("workers-a"))
    finally:
        procs.stop_all()
