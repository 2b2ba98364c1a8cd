"""`director dns serve --redis`: the DNS tier follows the shared state in a real Valkey."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import dns.edns
import dns.message
import dns.query
import dns.rdatatype

from director.state.embedded import EmbeddedValkey
from director.state.store import StateStore

POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answer(port: int, subnet: str) -> list[str]:
    ecs = dns.edns.ECSOption.from_text(subnet)
    query = dns.message.make_query("chat.infer.example.com", dns.rdatatype.A, use_edns=0,
                                   options=[ecs])
    response = dns.query.udp(query, "127.0.0.1", port=port, timeout=2)
    return sorted(rr.address for rrset in response.answer for rr in rrset)


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except dns.exception.Timeout:
            pass
        time.sleep(0.1)
    return False


def test_drain_in_redis_moves_the_dns_answer():
    with EmbeddedValkey() as valkey:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
             "--listen", f"127.0.0.1:{port}", "--redis", valkey.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            france = "2.2.2.0/24"  # FR in GeoLite2 2018: nearest EU region is eu-central
            assert wait_for(lambda: answer(port, france) == ["127.0.3.1"], 30)
            store = StateStore.from_url(valkey.url)
            store.set_drain("eu-central")
            assert wait_for(lambda: answer(port, france) == ["127.0.2.1"], 10)
            store.set_drain("eu-central", draining=False)
            assert wait_for(lambda: answer(port, france) == ["127.0.3.1"], 10)
            store.close()
        finally:
            process.terminate()
            process.wait(timeout=10)


def test_follow_policy_swaps_a_new_version_and_keeps_serving_on_a_broken_one():
    from policies import read_sources

    sources = read_sources(str(POLICY))
    with EmbeddedValkey() as valkey:
        store = StateStore.from_url(valkey.url)
        store.set_policy(sources.text, name=sources.name, files=sources.files)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
             "--listen", f"127.0.0.1:{port}", "--redis", valkey.url, "--follow-policy"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            france = "2.2.2.0/24"
            assert wait_for(lambda: answer(port, france) == ["127.0.3.1"], 30)
            store.set_policy("zone {", name=sources.name, files=sources.files)
            moved = sources.text.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9")
            time.sleep(1.5)  # the broken version is seen and rejected first
            assert answer(port, france) == ["127.0.3.1"]
            store.set_policy(moved, name=sources.name, files=sources.files)
            assert wait_for(lambda: answer(port, france) == ["127.0.3.9"], 15)
        finally:
            store.close()
            process.terminate()
            process.wait(timeout=10)
