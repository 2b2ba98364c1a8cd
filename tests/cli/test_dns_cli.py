"""`director dns serve --redis`: the DNS tier follows the shared state in a real Valkey."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dns.edns
import dns.message
import dns.query
import dns.rdatatype

from state.embedded import EmbeddedValkey
from state.store import StateStore

POLICY = Path(__file__).resolve().parents[2] / "policies" / "examples" / "global.dp"


def start_dns(*args: str) -> tuple[subprocess.Popen, int]:
    """``director dns serve`` on port 0 (the server picks one free for UDP and TCP alike);
    the process and the port it announced."""
    process = subprocess.Popen(
        [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
         "--listen", "127.0.0.1:0", "--no-precompile", *args],  # these ask known subnets
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("listening "):
            return process, int(line.split()[1].rsplit(":", 1)[1])
    raise AssertionError(f"dns serve exited {process.wait()}: {process.stderr.read()[-2000:]}")


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


def expect_answer(port: int, subnet: str, expected: list[str], timeout: float,
                  process: subprocess.Popen) -> None:
    """Wait until ``subnet`` is answered ``expected``; on failure say what was seen instead
    and whether the server is still running."""
    seen: list = []

    def check() -> bool:
        seen.append(answer(port, subnet))
        return seen[-1] == expected

    if wait_for(check, timeout):
        return
    state = f"exited {process.poll()}" if process.poll() is not None else "running"
    stderr = process.stderr.read()[-2000:] if process.poll() is not None else ""
    raise AssertionError(f"{subnet}: wanted {expected}, last answers {seen[-3:]}; server "
                         f"{state} {stderr}")


def test_drain_in_redis_moves_the_dns_answer():
    with EmbeddedValkey() as valkey:
        process, port = start_dns("--redis", valkey.url)
        try:
            france = "2.2.2.0/24"  # FR in GeoLite2 2018: nearest EU region is eu-central
            expect_answer(port, france, ["127.0.3.1"], 30, process)
            store = StateStore.from_url(valkey.url)
            store.set_drain("eu-central")
            expect_answer(port, france, ["127.0.2.1"], 10, process)
            store.set_drain("eu-central", draining=False)
            expect_answer(port, france, ["127.0.3.1"], 10, process)
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
        process, port = start_dns("--redis", valkey.url, "--follow-policy")
        try:
            france = "2.2.2.0/24"
            expect_answer(port, france, ["127.0.3.1"], 30, process)
            store.set_policy("zone {", name=sources.name, files=sources.files)
            moved = sources.text.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9")
            time.sleep(1.5)  # the broken version is seen and rejected first
            assert answer(port, france) == ["127.0.3.1"]
            store.set_policy(moved, name=sources.name, files=sources.files)
            expect_answer(port, france, ["127.0.3.9"], 15, process)
        finally:
            store.close()
            process.terminate()
            process.wait(timeout=10)


def test_healthz_and_metrics_name_the_policy_served():
    """The metrics listener's /healthz and director_policy_info: the file's digest (version
    null) until a stored version is served, then that version, digest and epoch."""
    from director import policy_gate
    from policies import read_sources
    from state.policy_identity import policy_digest

    sources = read_sources(str(POLICY))
    with EmbeddedValkey() as valkey:
        store = StateStore.from_url(valkey.url)
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
             "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--redis", valkey.url,
             "--follow-policy", "--no-precompile"],  # no subnet is asked
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert process.stdout is not None
            metrics = next(line for line in process.stdout if line.startswith("metrics "))
            url = f"http://{metrics.split()[1]}"
            accepted = policy_gate.accept(str(POLICY)).sources()
            file_digest = policy_digest(accepted.name, accepted.text, accepted.files)
            health = read_json(f"{url}/healthz")
            assert health["policy"] == {"version": None, "digest": file_digest, "epoch": ""}
            moved = sources.text.replace("endpoints 127.0.3.1", "endpoints 127.0.3.9")
            version, epoch = store.write_policy(moved, name=sources.name, files=sources.files)
            digest = policy_digest(sources.name, moved, sources.files)
            assert wait_for(lambda: read_json(f"{url}/healthz")["policy"] == {
                "version": version, "digest": digest, "epoch": epoch}, 30)
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            assert (f'director_policy_info{{component="dns",digest="{digest[:16]}",'
                    f'epoch="{epoch}",version="{version}"}} 1.0') in text
        finally:
            store.close()
            process.terminate()
            process.wait(timeout=10)


def read_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def test_a_taken_port_is_a_clear_error_naming_the_address_and_protocol():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
             "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"cannot bind DNS TCP 127.0.0.1:{port}: Address already in use" in result.stderr


def test_a_server_answers_only_once_its_network_map_is_there(maxmind_test_city: Path,
                                                            tmp_path: Path) -> None:
    """The map is built before the server listens (so that no query takes the slow path),
    then kept: a second start loads it and listens at once."""
    def start(*extra: str) -> list[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "director", "dns", "serve", "--policy", str(POLICY),
             "--listen", "127.0.0.1:0", "--geoip", str(maxmind_test_city), "--map-cache",
             str(tmp_path / "maps"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        lines = []
        for line in process.stdout:  # one stream: the order the process wrote them in
            lines.append(line)
            if line.startswith("listening "):
                break
        process.terminate()
        process.wait(10)
        return lines

    def first(lines: list[str], text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    built = start()
    assert first(built, "answering once the GeoIP network map is built") < first(
        built, "built in") < first(built, "listening ")
    loaded = start()  # ready at once: nothing to wait for
    assert first(loaded, "loaded from") < first(loaded, "listening ")
    assert not any("answering once" in line for line in loaded)
