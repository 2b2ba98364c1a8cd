"""``director up --simulate`` with the example policy, end to end: DNS answers by residency
and location, a streaming completion through the answered address, a drain through the
admin API that moves DNS answers within TTL plus one probe interval, the commands it prints
(also with API keys turned on), and Ctrl-C that leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import dns.edns
import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import pytest
import redis

from director.up.console import try_commands
from director.up.plan import UpOptions
from policies import load_policy
from state.acl import ROLES
from state.credentials import embed
from state.ports import free_port
from tests.free_ports import on_free_ports

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "policies" / "examples" / "global.dp"
EU = {"127.0.2.1", "127.0.3.1"}
FRANCE, US = "2.2.2.0/24", "8.8.8.0/24"  # located by the bundled GeoLite2 City 2018
CHAT = "chat.infer.example.com"
TTL, PROBE_INTERVAL = 5.0, 1.0  # the example policy's chat service


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(dns.exception.DNSException, OSError, ValueError):
            if predicate():
                return True
        time.sleep(0.1)
    return False


@dataclass
class Up:
    process: subprocess.Popen[str]
    run_dir: Path
    dns_port: int
    api: str
    balancer_port: int
    policy: Path  # the policy file it runs
    admin_port: int

    def token(self, kind: str = "admin") -> str:
        return (self.run_dir / f"{kind}.token").read_text().strip()

    def answer(self, subnet: str, name: str = CHAT) -> list[str]:
        query = dns.message.make_query(name, dns.rdatatype.A, use_edns=0,
                                       options=[dns.edns.ECSOption.from_text(subnet)])
        response = dns.query.udp(query, "127.0.0.1", port=self.dns_port, timeout=1)
        return sorted(rr.address for rrset in response.answer for rr in rrset)

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, object]:
        request = urllib.request.Request(
            self.api + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token()}",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def log(self) -> str:
        logs = sorted((self.run_dir / "logs").glob("*.log"))
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    run_dir = tmp_path_factory.mktemp("up")
    dns_port, api_port = free_port(), free_port()
    metrics_port, balancer_port, admin_port = free_port(), free_port(), free_port()
    policy = on_free_ports(POLICY, tmp_path_factory.mktemp("policy"))
    process = subprocess.Popen(
        [sys.executable, "-m", "director", "up", "--simulate", "--policy", str(policy),
         "--run-dir", str(run_dir), "--dns", f"127.0.0.1:{dns_port}",
         "--api", f"127.0.0.1:{api_port}", "--dns-metrics", f"127.0.0.1:{metrics_port}",
         "--balancer-port", str(balancer_port), "--balancer-admin-port", str(admin_port),
         # known subnets only: no GeoIP map to wait for (the plan test checks up asks for one)
         "--no-dns-precompile"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    system = Up(process, run_dir, dns_port, f"http://127.0.0.1:{api_port}", balancer_port,
                policy, admin_port)
    try:
        ready = wait_for(lambda: (run_dir / "up.json").exists(), 120)
        assert ready, process.stdout.read() if process.poll() is not None else system.log()
        yield system
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def stream_completion(address: str, port: int, client_ip: str) -> tuple[str, list[str]]:
    """POST a streaming chat completion; returns the serving region and the SSE data lines."""
    body = {"model": "llama-3.1-8b-instruct", "stream": True, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Bonjour"}]}
    request = urllib.request.Request(
        f"http://{address}:{port}/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Director-Client-IP": client_ip})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [line[len("data: "):].strip() for line in map(bytes.decode, response)
                  if line.startswith("data: ")]
        return response.headers["x-director-region"], events


def test_eu_client_gets_an_eu_region_and_us_client_us_east(up: Up) -> None:
    assert wait_for(lambda: up.answer(FRANCE) == ["127.0.3.1"], 30), up.log()
    assert set(up.answer(FRANCE)) <= EU
    assert wait_for(lambda: up.answer(US) == ["127.0.1.1"], 30), up.log()


def test_streaming_completion_through_the_answered_address(up: Up) -> None:
    (address,) = up.answer(FRANCE)
    region, events = stream_completion(address, up.balancer_port, "2.2.2.2")
    assert region in ("eu-west", "eu-central")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert any(c["choices"][0]["delta"].get("content") for c in chunks)


def test_drain_through_the_api_moves_answers_within_ttl_plus_a_probe_interval(up: Up) -> None:
    assert wait_for(lambda: up.answer(FRANCE) == ["127.0.3.1"], 30)
    status, body = up.call("POST", "/api/v1/regions/eu-central/drain")
    assert status == 200, body
    drained_at = time.monotonic()
    try:
        assert wait_for(lambda: up.answer(FRANCE) == ["127.0.2.1"], TTL + PROBE_INTERVAL)
        assert time.monotonic() - drained_at <= TTL + PROBE_INTERVAL
    finally:
        status, body = up.call("POST", "/api/v1/regions/eu-central/undrain")
        assert status == 200, body
    assert wait_for(lambda: up.answer(FRANCE) == ["127.0.3.1"], TTL + PROBE_INTERVAL)


def test_every_simulated_gpu_is_scraped_under_its_engines_metric_names(up: Up) -> None:
    """The example fleet mixes vLLM, SGLang and TGI servers; each simulator exports its
    engine's names, so the probe workers store a load for every one of them."""
    engines = {}
    for region in ("us-east", "ap-south"):
        text = (POLICY.parent / "regions" / f"{region}.dp").read_text()
        engines.update({engine: region for engine in ("vllm", "sglang", "tgi")
                        if f"engine {engine}" in text})
    assert set(engines) == {"vllm", "sglang", "tgi"}  # the policy still mixes them
    unscraped: list[str] = []

    def all_scraped() -> bool:
        _, body = up.call("GET", "/api/v1/status")
        unscraped[:] = [f"{r['name']}/{g['name']}" for r in body["regions"]
                        for g in r["gpus"] if g["waiting"] is None or g["running"] is None]
        return not unscraped

    assert wait_for(all_scraped, 30), (unscraped, up.log())


def test_a_dead_child_is_restarted(up: Up) -> None:
    status, body = up.call("GET", "/api/v1/processes")
    assert status == 200, body
    before = {p["name"]: p for p in body["processes"]}
    victim = before["gpu/ap-south/aps1-a100-b"]
    os.kill(victim["pid"], signal.SIGKILL)

    def restarted() -> bool:
        _, now = up.call("GET", "/api/v1/processes")
        entry = {p["name"]: p for p in now["processes"]}["gpu/ap-south/aps1-a100-b"]
        return entry["restarts"] == victim["restarts"] + 1 and entry["state"] == "running"

    assert wait_for(restarted, 30)


def balancer_get(up: Up, region_ip: str, path: str, *, admin: bool = True) -> str:
    """GET ``path`` of a balancer: on its admin listener (``/metrics``, ``/_admin/*``), or
    on its public port."""
    port = up.admin_port if admin else up.balancer_port
    with urllib.request.urlopen(f"http://{region_ip}:{port}{path}", timeout=10) as response:
        return response.read().decode()


def test_balancers_learn_what_the_engines_publish(up: Up) -> None:
    """No GPU server's capacity is configured: us-east's SGLang server says its slots on
    /v1/loads, ap-south's TGI servers their in-flight limit on /info; the balancers show
    it in /_admin/state, /metrics and explain."""

    def state(region_ip: str) -> dict[str, dict]:
        body = json.loads(balancer_get(up, region_ip, "/_admin/state"))
        return {b["name"]: b["capacity"] for b in body["backends"]}

    assert wait_for(lambda: state("127.0.1.1")["use1-a100-b"]["source"] == "engine", 30), \
        state("127.0.1.1")
    us_east = state("127.0.1.1")
    assert us_east["use1-a100-b"]["slots"] == 256  # the simulator's max_num_seqs (vLLM's)
    assert {c["source"] for n, c in us_east.items() if n != "use1-a100-b"} <= {
        "unknown", "observed"}
    assert wait_for(lambda: state("127.0.4.1")["aps1-a100-a"]["limit"] == 128, 30)
    metrics = balancer_get(up, "127.0.1.1", "/metrics")
    assert 'director_balancer_capacity{backend="use1-a100-b",source="engine"} 256.0' in metrics
    request = urllib.request.Request(
        f"http://127.0.1.1:{up.admin_port}/_admin/explain", method="POST",
        data=json.dumps({"path": "/v1/chat/completions", "body": {
            "model": "llama-3.1-8b-instruct", "messages": [{"role": "user", "content": "hi"}]}
        }).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        explained = json.loads(response.read())
    assert explained["capacity"]["use1-a100-b"].startswith("capacity 256 (engine)")
    for path in ("/metrics", "/_admin/state"):  # never on the public port
        with pytest.raises(urllib.error.HTTPError) as refused:
            balancer_get(up, "127.0.1.1", path, admin=False)
        assert refused.value.code == 404


def test_the_state_refuses_strangers_and_each_process_has_its_roles_user(up: Up) -> None:
    """The embedded Valkey answers no client without a password; each role has its own
    user with a password drawn for this run, in files of mode 0600, and no command line,
    log or up.json shows one."""
    manifest = json.loads((up.run_dir / "up.json").read_text())
    url = manifest["redis"]
    assert "@" not in url
    port = urlsplit(url).port
    assert port is not None
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(100).startswith(b"-NOAUTH")
    folder = Path(manifest["redis_credentials"])
    passwords = {role: (folder / f"{role}.password").read_text().strip() for role in ROLES}
    config = up.run_dir / "valkey" / "users.conf"
    for path in [config, *(folder / f"{role}.password" for role in ROLES)]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    shown = [config.read_text(), json.dumps(manifest), up.log(),
             *processes_mentioning(url, str(up.run_dir))]
    assert not [p for p in passwords.values() for text in shown if p in text]

    def client(role: str) -> redis.Redis:
        return redis.Redis.from_url(embed(url, role, passwords[role]), socket_timeout=5)

    assert client("api").hgetall("director:policy")  # up stored the policy as api
    for role in ("balancer", "worker", "dns"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client(role).hset("director:tenant-keys", "0123456789ab", "{}")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client(role).hset("director:drain", "eu-west", "1")
    _, body = up.call("GET", "/api/v1/processes")
    roles = {"balancer": "balancer", "workers": "worker", "dns": "dns", "api": "api"}
    for process in body["processes"]:
        environ = Path(f"/proc/{process['pid']}/environ").read_bytes().split(b"\0")
        user = next((e.split(b"=", 1)[1].decode() for e in environ
                     if e.startswith(b"DIRECTOR_REDIS_USER=")), None)
        assert user == roles.get(process["name"].split("/")[0]), process["name"]


def processes_mentioning(*needles: str) -> list[str]:
    """Command lines of live processes that contain any of ``needles`` (Celery's forked pool
    and other grandchildren included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if any(needle in cmdline for needle in needles):
                found.append(cmdline)
    return found


def printed_commands(up: Up, timeout: float = 30) -> list[str]:
    """The commands ``director up`` printed under ``try:`` (read from its stdout)."""
    lines: list[str] = []

    def read() -> None:
        assert up.process.stdout is not None
        for line in up.process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops everything"):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert not reader.is_alive(), lines
    start = lines.index("try:") + 1
    return [line.strip() for line in lines[start:] if line.strip()][:-1]


def run_shell(*commands: str) -> str:
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (commands, done.stdout, done.stderr)
    return done.stdout


def completed(output: str) -> bool:
    return output.rstrip().endswith("data: [DONE]")


def test_the_printed_commands_work_and_with_api_keys_on_make_and_send_a_key(up: Up) -> None:
    """The dig and curl ``director up`` printed answer and stream; with the policy changed to
    turn API keys on, the keyless curl is refused and the commands printed for that policy
    (make a key with the admin token, send it) stream again."""
    for tool in ("dig", "curl", "python3"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (./run test installs it)")
    printed = printed_commands(up)
    dig, curl = printed[0], printed[1]
    assert dig.startswith("dig ") and curl.startswith("curl -N ")
    assert wait_for(lambda: set(up.answer(FRANCE)) <= EU and up.answer(FRANCE), 30)
    assert "ANSWER SECTION" in run_shell(dig)
    assert completed(run_shell(curl))

    api_port = int(up.api.rsplit(":", 1)[1])
    options = UpOptions(up.policy, up.run_dir, "", simulate=True,
                        dns=("127.0.0.1", up.dns_port), api=("127.0.0.1", api_port),
                        balancer_port=up.balancer_port)
    original = up.policy.read_text()
    assert try_commands(load_policy(str(up.policy)), options, up.token("read")) == printed
    keyed = up.policy.parent / "keyed.dp"
    keyed.write_text(original + "\nidentity { api-keys on }\ntenant demo {}\n")
    status, body = up.call("PUT", "/api/v1/policy", {"text": keyed.read_text()})
    assert status == 200, body
    try:
        assert wait_for(lambda: "invalid_api_key" in run_shell(curl), 30)  # 401 now
        commands = try_commands(load_policy(str(keyed)), options, up.token("read"))
        make_key = next(c for c in commands if c.startswith("KEY="))
        keyed_curl = next(c for c in commands if c.startswith("curl -N "))
        assert completed(run_shell(make_key, keyed_curl))
    finally:
        status, body = up.call("PUT", "/api/v1/policy", {"text": original})
        assert status == 200, body
        assert wait_for(lambda: completed(run_shell(curl)), 30)


def test_ctrl_c_leaves_no_process_behind(up: Up) -> None:
    redis_url = json.loads((up.run_dir / "up.json").read_text())["redis"]
    assert processes_mentioning(redis_url)  # the needle finds the running system
    _, body = up.call("GET", "/api/v1/processes")
    pids = [p["pid"] for p in body["processes"] if p["pid"]]
    assert len(pids) == len(body["processes"])  # everything was running
    up.process.send_signal(signal.SIGINT)
    assert up.process.wait(60) == 0
    time.sleep(0.5)
    alive = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            alive.append(pid)
    assert alive == []
    assert processes_mentioning(redis_url, str(up.run_dir)) == []
    assert not (up.run_dir / "control.sock").exists()


def test_a_taken_dns_port_stops_up_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        policy = on_free_ports(POLICY, tmp_path / "policy")
        result = subprocess.run(
            [sys.executable, "-m", "director", "up", "--simulate", "--policy", str(policy),
             "--run-dir", str(tmp_path), "--dns", f"127.0.0.1:{port}",
             "--api", f"127.0.0.1:{free_port()}", "--dns-metrics", f"127.0.0.1:{free_port()}",
             "--balancer-port", str(free_port()), "--balancer-admin-port", str(free_port())],
            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"dns: UDP 127.0.0.1:{port} (Address already in use)" in result.stderr
    assert "starting" not in result.stdout
    assert processes_mentioning(str(tmp_path)) == []

