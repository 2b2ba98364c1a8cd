# SPDX-License-Identifier: Apache-2.0
"""``director up --simulate`` as a subprocess for the end-to-end drill tests: loopback
only, free ports for DNS, the admin API, metrics and the balancers, a temporary run dir."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from state.ports import free_port
from tests.free_ports import on_free_ports

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "policies" / "examples" / "global.dp"
START_TIMEOUT_S = 120.0


@dataclass
class UpSystem:
    process: subprocess.Popen[str]
    run_dir: Path
    api: str

    @property
    def token(self) -> str:
        return (self.run_dir / "admin.token").read_text().strip()

    def log(self) -> str:
        logs = sorted((self.run_dir / "logs").glob("*.log"))
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs)

    def drill(self, path: Path, report_dir: Path, *args: str,
              timeout: float = 150) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "director", "drill", "run", str(path), "--target",
             self.api, "--token", self.token, "--report-dir", str(report_dir), "--no-live",
             *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _healthy(system: UpSystem) -> bool:
    import urllib.request

    request = urllib.request.Request(system.api + "/api/v1/status",
                                     headers={"Authorization": f"Bearer {system.token}"})
    with urllib.request.urlopen(request, timeout=2) as response:
        status = json.loads(response.read())
    return all(r.get("healthy") is True for r in status["regions"])


def drill_variant(drill: Path, path: Path, replacements: Sequence[tuple[str, str]]) -> Path:
    """A copy of ``drill`` at ``path`` with each text replaced (each must occur exactly
    once: a drill file that changed fails the test rather than running unshortened)."""
    text = drill.read_text()
    for old, new in replacements:
        assert text.count(old) == 1, f"{drill.name} changed: {old!r} is not in it once"
        text = text.replace(old, new)
    path.write_text(text)
    return path


@contextlib.contextmanager
def director_up(run_dir: Path, policy: Path = EXAMPLE, *extra: str,
                env: Mapping[str, str] | None = None) -> Iterator[UpSystem]:
    """``director up --simulate`` of ``policy``, healthy; ``env``: more environment for it
    and its children."""
    api = free_port()
    policy = on_free_ports(policy, run_dir / "policy")  # beside a running `director up` too
    command = [sys.executable, "-m", "director", "up", "--simulate", "--policy", str(policy),
               "--run-dir", str(run_dir), "--dns", f"127.0.0.1:{free_port()}",
               "--api", f"127.0.0.1:{api}", "--dns-metrics", f"127.0.0.1:{free_port()}",
               "--balancer-port", str(free_port()), "--balancer-admin-port", str(free_port()),
               "--no-dns-precompile",  # the drills ask known subnets; spare the 2-core box
               *extra]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               env=None if env is None else {**os.environ, **env})
    system = UpSystem(process, run_dir, f"http://127.0.0.1:{api}")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                if (run_dir / "up.json").exists() and _healthy(system):
                    break
            time.sleep(0.5)
        else:
            output = process.stdout.read() if process.poll() is not None else system.log()
            raise RuntimeError(f"director up did not become healthy:\n{output}")
        yield system
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
