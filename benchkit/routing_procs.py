# SPDX-License-Identifier: Apache-2.0
"""Processes of the routing benchmark: simulated GPU servers, our balancer, nginx, HAProxy,
smg (the SGLang Model Gateway, ``bench/install_peers.sh``).

Every process binds to 127.0.0.1, is started by this module and stopped by it (SIGTERM, then
SIGKILL after a grace period), by its own pid. Each simulated server is its own process, as
in ``director up --simulate``, so servers do not steal each other's event loop.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchkit.routing_configs import Upstream, render_haproxy, render_nginx
from regions.simulator.config import EngineConfig
from state.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"
SMG = Path(PYTHON).with_name("smg")
SMG_POLICIES = ("cache_aware", "prefix_hash", "consistent_hashing", "least_load",
                "power_of_two", "round_robin")


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User + system CPU of the process (and of nginx's worker) so far."""
        total = 0.0
        for pid in (self.pid, *_children(self.pid)):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        return total

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(grace)


def _spawn(command: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(list(command), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)


def _wait_port(port: int, process: subprocess.Popen[bytes], name: str, log: Path,
               timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out = log.read_text(errors="replace")[-800:]
            raise RuntimeError(f"{name} exited with {process.returncode}: {out}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on {HOST}:{port} within {timeout}s")


def start_simulator(workdir: Path, name: str, speed: float, time_scale: float,
                    engine: EngineConfig | None = None,
                    kv_events: tuple[str, str] | None = None) -> Proc:
    """One simulated server; ``engine`` sets its slots, KV budget, context length and
    chunked prefill (the simulator's defaults otherwise); ``kv_events``: the addresses it
    publishes its KV events and their replay on."""
    port = free_port()
    log = workdir / f"sim-{name}.log"
    engine = engine or EngineConfig()
    chunk = engine.max_prefill_tokens if engine.chunked_prefill else 0
    events = ["--kv-events", kv_events[0], "--kv-events-replay", kv_events[1]] \
        if kv_events else []
    process = _spawn(
        [PYTHON, str(ROOT / "bench" / "routing_sim.py"), "--listen", f"{HOST}:{port}",
         "--name", name, "--speed", str(speed), "--time-scale", str(time_scale),
         "--model", "sim-model", "--max-num-seqs", str(engine.max_num_seqs),
         "--kv-cache-tokens", str(engine.kv_cache_tokens),
         "--max-model-len", str(engine.max_model_len), "--chunked-prefill", str(chunk),
         *events], log)
    _wait_port(port, process, name, log, 30)
    return Proc(name, process, f"http://{HOST}:{port}", log)


def start_ours(workdir: Path, profile: str, upstreams: Sequence[Upstream],
               loop: str = "uvloop", extra: Sequence[str] = ()) -> Proc:
    port = free_port()
    log = workdir / f"ours-{profile}.log"
    backends = [f"{name}=http://{host}:{p}" for name, host, p in upstreams]
    process = _spawn(
        [PYTHON, str(ROOT / "bench" / "routing_balancer.py"), "--listen", f"{HOST}:{port}",
         "--profile", profile, "--loop", loop, *extra,
         *(a for b in backends for a in ("--backend", b))], log)
    _wait_port(port, process, f"ours/{profile}", log, 30)
    return Proc(f"ours/{profile}", process, f"http://{HOST}:{port}", log)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def start_nginx(workdir: Path, upstreams: Sequence[Upstream]) -> Proc:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(render_nginx(workdir, (HOST, port), upstreams))
    log = workdir / "nginx.log"
    process = _spawn([binary, "-p", str(workdir), "-c", str(conf)], log)
    _wait_port(port, process, "nginx", log, 15)
    return Proc("nginx", process, f"http://{HOST}:{port}", log)


def start_haproxy(workdir: Path, upstreams: Sequence[Upstream]) -> Proc:
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    port = free_port()
    conf = workdir / "haproxy.cfg"
    conf.write_text(render_haproxy(workdir, (HOST, port), upstreams))
    log = workdir / "haproxy.log"
    process = _spawn([binary, "-db", "-f", str(conf)], log)
    _wait_port(port, process, "haproxy", log, 15)
    return Proc("haproxy", process, f"http://{HOST}:{port}", log)


def start_smg(workdir: Path, upstreams: Sequence[Upstream], policy: str,
              timeout: float = 30.0) -> Proc:
    """smg in front of ``upstreams`` with ``policy``, its defaults otherwise, but for:

    - the workers are registered through its ``POST /workers`` with ``runtime_type: vllm``
      (what it detects on a real vLLM server through ``GET /version``, which the simulator
      does not serve: given as ``--worker-urls`` they would be ``generic`` workers, whose
      load smg never reads). As vLLM workers it polls their ``/metrics``
      (``vllm:num_requests_running``/``_waiting``, ``vllm:kv_cache_usage_perc``);
    - ``--load-monitor-interval 1`` (its floor; default 10 wall seconds, 50 model seconds at
      time scale 5);
    - its Prometheus listener on 127.0.0.1 and a free port (default 0.0.0.0:29000), a
      one-second shutdown grace and warnings-only logs.

    Its CPU is counted as the others' (one process: the Rust router runs inside it)."""
    if policy not in SMG_POLICIES:
        raise ValueError(f"smg: policy {policy!r} is not one of {', '.join(SMG_POLICIES)}")
    port, metrics_port = free_port(), free_port()
    log = workdir / f"smg-{policy}.log"
    process = _spawn(
        [str(SMG), "launch", "--host", HOST, "--port", str(port), "--policy", policy,
         "--prometheus-host", HOST, "--prometheus-port", str(metrics_port),
         "--load-monitor-interval", "1", "--shutdown-grace-period-secs", "1",
         "--log-level", "warn"], log)
    _wait_port(port, process, f"smg/{policy}", log, timeout)
    proc = Proc(f"smg/{policy}", process, f"http://{HOST}:{port}", log)
    try:
        for _, host, p in upstreams:
            _post_json(f"{proc.url}/workers", {"url": f"http://{host}:{p}",
                                               "runtime_type": "vllm"})
        deadline = time.monotonic() + timeout
        while True:
            with urllib.request.urlopen(f"{proc.url}/workers", timeout=5) as resp:
                workers = json.load(resp)["workers"]
            ready = [w for w in workers if w.get("status") == "ready" and w.get("is_healthy")]
            if len(ready) == len(upstreams):
                return proc
            if time.monotonic() > deadline:
                raise RuntimeError(f"smg/{policy}: {len(ready)} of {len(upstreams)} workers "
                                   f"ready after {timeout}s: {workers}")
            time.sleep(0.1)
    except BaseException:
        proc.stop()
        raise


def _post_json(url: str, payload: object) -> None:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        resp.read()


def have(binary: str) -> bool:
    if binary == "smg":
        return SMG.exists()
    return shutil.which(binary) is not None or Path(f"/usr/sbin/{binary}").exists()
