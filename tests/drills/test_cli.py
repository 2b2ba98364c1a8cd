# SPDX-License-Identifier: Apache-2.0
"""``director drill check`` and ``director drill run --dry-run`` as subprocesses, over the
shipped drills and broken ones; the exit codes of a drill that cannot run."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drills.loader import load_drill
from drills.timeline import render

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "drills").glob("*.yaml"))


def director(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "director", "drill", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_shipped_drills_are_there() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"evacuate-eu-west-8x", "kill-region", "freeze-region", "gpu-slow", "redis-outage",
            "workers-die", "all-eu-down", "ci-kill-eu-west"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_drill_validates(path: Path) -> None:
    drill = load_drill(path)
    assert drill.hypothesis and drill.checks
    assert any(c.type.value == "residency" for c in drill.checks)
    text = render(drill)
    assert "timeline:" in text and "restore (always)" in text


def test_the_ci_drill_is_under_a_minute() -> None:
    drill = load_drill(ROOT / "drills" / "ci-kill-eu-west.yaml")
    assert drill.duration + drill.report.drain < 60


def test_check_all_shipped_drills() -> None:
    result = director("check", str(SHIPPED[0]))
    assert result.returncode == 0, result.stderr
    assert "ok: drill" in result.stdout


def test_check_reports_a_broken_file_with_its_position(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text((ROOT / "drills" / "ci-kill-eu-west.yaml").read_text()
                      .replace("type: region.kill", "type: region.kil"))
    result = director("check", str(broken))
    assert result.returncode == 1
    assert f"{broken}:" in result.stderr and "did you mean 'region.kill'" in result.stderr
    assert "^" in result.stderr


def test_run_with_a_broken_file_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: drill/v1\n")
    assert director("run", str(broken), "--no-live").returncode == 3


def test_dry_run_without_a_system_prints_the_timeline() -> None:
    result = director("run", "drills/ci-kill-eu-west.yaml", "--dry-run",
                      "--target", f"http://127.0.0.1:{closed_port()}", "--token", "x")
    assert result.returncode == 0, result.stderr
    assert "inject kill-eu-west (region.kill on eu_west)" in result.stdout
    assert "dead-man ttl 30s" in result.stdout
    assert "targets not resolved" in result.stdout and "nothing injected" in result.stdout


def test_a_system_that_cannot_be_reached_is_an_error(tmp_path: Path) -> None:
    result = director("run", "drills/ci-kill-eu-west.yaml", "--no-live", "--token", "x",
                      "--target", f"http://127.0.0.1:{closed_port()}",
                      "--report-dir", str(tmp_path), "--junit", str(tmp_path / "j.xml"))
    assert result.returncode == 3
    assert "cannot reach the admin API" in result.stderr
    (journal,) = tmp_path.glob("ci-kill-eu-west-*.json")
    assert '"verdict": "error"' in journal.read_text()
    assert (tmp_path / "j.xml").exists()
