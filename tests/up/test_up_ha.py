"""``director up --ha --dnssec --simulate``: every tier replicated on loopback, the state on
a real Sentinel set. Every instance is on the status page, both DNS servers answer both of
a region's balancers and leave out one that hangs, both sign without holding a key, and
when the state's master hangs the APIs' writes reach the new master, acknowledged by a
replica, with what was written before still there."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dns.dnssec
import dns.edns
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import redis

from tests.drills.up_system import UpSystem, director_up
from tests.up.test_up_end_to_end import wait_for

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "examples" / "ha.dp"
FRANCE = "2.2.2.0/24"


class HaUp:
    """A running ``director up --ha`` (``tests.drills.up_system.director_up``)."""

    def __init__(self, system: UpSystem) -> None:
        self.system, self.run_dir = system, system.run_dir
        manifest = json.loads((self.run_dir / "up.json").read_text())
        self.dns_port = int(manifest["dns"].rsplit(":", 1)[1])
        self.api_port = int(system.api.rsplit(":", 1)[1])
        self.pids = {p["name"]: p["pid"] for p in manifest["processes"]}

    def call(self, api: str, method: str, path: str) -> tuple[int, dict]:
        request = urllib.request.Request(f"http://{api}:{self.api_port}/api/v1{path}",
                                         method=method,
                                         headers={"Authorization": f"Bearer "
                                                  f"{self.system.token}"})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {"error": exc.read().decode(errors="replace")}

    def answer(self, server: str) -> list[str]:
        query = dns.message.make_query("chat.infer.example.com", dns.rdatatype.A, use_edns=0,
                                       options=[dns.edns.ECSOption.from_text(FRANCE)])
        response = dns.query.udp(query, server, port=self.dns_port, timeout=1)
        return sorted(rr.address for rrset in response.answer for rr in rrset)

    def pid(self, name: str) -> int:
        return self.pids[name]

    def log(self) -> str:
        return self.system.log()


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaUp]:
    with director_up(tmp_path_factory.mktemp("up-ha"), POLICY, "--ha", "--dnssec") as system:
        yield HaUp(system)


def test_both_dns_servers_sign_with_what_the_presigner_publishes_holding_no_key(
        ha: HaUp) -> None:
    def signed(server: str) -> dns.message.Message | None:
        query = dns.message.make_query("chat.infer.example.com", dns.rdatatype.A,
                                       want_dnssec=True)
        reply = dns.query.udp(query, server, port=ha.dns_port, timeout=1)
        return reply if reply.rcode() == dns.rcode.NOERROR else None

    for server in ("127.0.0.1", "127.0.0.2"):
        assert wait_for(lambda server=server: signed(server) is not None, 30), ha.log()
        reply = signed(server)
        assert reply is not None
        keys = dns.query.udp(dns.message.make_query("infer.example.com", "DNSKEY",
                                                    want_dnssec=True),
                             server, port=ha.dns_port, timeout=1).answer[0]
        answer, sigs = reply.answer
        dns.dnssec.validate(answer, sigs, {keys.name: keys})
    for name in ("dns/1", "dns/2"):
        argv = Path(f"/proc/{ha.pid(name)}/cmdline").read_bytes().split(b"\0")
        assert b"--dnssec-presigned" in argv and b"--dnssec-keys" not in argv
    assert "dnssec/presign" in ha.pids


def test_every_replica_runs_and_both_dns_servers_answer_both_balancers(ha: HaUp) -> None:
    def instances() -> Counter[str]:
        _, status = ha.call("127.0.0.2", "GET", "/status")
        return Counter(i["role"] for i in status.get("instances", []) if i["state"] == "up")

    wanted = Counter({"balancer": 4, "dns": 2, "api": 2, "worker": 2})
    assert wait_for(lambda: instances() == wanted, 30), (instances(), ha.log())
    for server in ("127.0.0.1", "127.0.0.2"):
        assert wait_for(lambda s=server: ha.answer(s) == ["127.0.2.1", "127.0.2.2"], 15), \
            ha.answer(server)


def test_a_hung_balancer_leaves_the_answers_and_comes_back(ha: HaUp) -> None:
    """Its own probe fails: both DNS servers answer the region's other balancer alone, and
    both again once it answers."""
    hung = ha.pid("balancer/eu-west/2")
    os.kill(hung, signal.SIGSTOP)
    try:
        for server in ("127.0.0.1", "127.0.0.2"):
            assert wait_for(lambda s=server: ha.answer(s) == ["127.0.2.1"], 15), \
                (ha.answer(server), ha.log())
    finally:
        os.kill(hung, signal.SIGCONT)
    for server in ("127.0.0.1", "127.0.0.2"):
        assert wait_for(lambda s=server: ha.answer(s) == ["127.0.2.1", "127.0.2.2"], 15), \
            ha.answer(server)


def test_writes_follow_the_state_master_when_it_hangs(ha: HaUp) -> None:
    """The master stopped (SIGSTOP: alive to the supervisor, dead to Sentinel): Sentinel
    moves the master, the APIs' writes reach the new one, acknowledged by a replica; what
    was written before is still there, and the old master, woken, rejoins as a replica."""
    status, before = ha.call("127.0.0.1", "POST", "/regions/us-east/gpus/use1-h100-b/drain")
    assert status == 200 and before["durability"]["durable"], before
    master = ha.pid("redis/1")
    os.kill(master, signal.SIGSTOP)
    try:
        def durable_write() -> bool:
            code, body = ha.call("127.0.0.2", "POST",
                                 "/regions/us-east/gpus/use1-a100-b/drain")
            return code == 200 and body["durability"]["durable"]

        assert wait_for(durable_write, 30), ha.log()
        _, status = ha.call("127.0.0.1", "GET", "/status")
        drained = {g["name"] for r in status["regions"] for g in r["gpus"] if g["draining"]}
        assert {"use1-h100-b", "use1-a100-b"} <= drained, drained
    finally:
        os.kill(master, signal.SIGCONT)
    sentinel = redis.Redis("127.0.8.2", 26379, socket_timeout=2)

    def rejoined() -> bool:
        replicas = sentinel.sentinel_slaves("director-state")
        return any(r["ip"] == "127.0.8.1" and not r["is_sdown"] and not r["is_disconnected"]
                   for r in replicas)

    assert wait_for(rejoined, 30), ha.log()
