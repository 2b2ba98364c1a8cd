# SPDX-License-Identifier: Apache-2.0
"""Drills against ``director up --simulate`` with the example policy: the CI-sized drill
passes (under a minute); a fault that cannot be injected ends in exit 3 with what was
injected before it restored; Ctrl-C aborts (exit 2) and restores; a dry run resolves
targets and injects nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.drills.up_system import ROOT, UpSystem, director_up, drill_variant

pytestmark = pytest.mark.long

FILES = Path(__file__).resolve().parent / "files"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpSystem]:
    with director_up(tmp_path_factory.mktemp("up")) as running:
        yield running


def journal(report_dir: Path) -> dict:
    (path,) = report_dir.glob("*.json")
    return json.loads(path.read_text())


def test_ci_drill_passes(system: UpSystem, tmp_path: Path) -> None:
    result = system.drill(ROOT / "drills" / "ci-kill-eu-west.yaml", tmp_path,
                          "--junit", str(tmp_path / "junit.xml"))
    data = journal(tmp_path)
    verdicts = [(c["name"], c.get("value"), c.get("passed")) for c in data["checks"]]
    assert result.returncode == 0, (f"{data['verdict']}: {data.get('reason')}; {verdicts}\n"
                                    + result.stdout + result.stderr + system.log())
    assert data["verdict"] == "passed"
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["residency-held"]["value"] == 0
    assert checks["eu-failover"]["value"] < 10
    (fault,) = data["faults"]
    assert fault["restored"] and fault["calls"][0]["status"] == 200
    assert fault["calls"][0]["body"]["ttl"] == 30.0  # the dead-man ttl rides on the call
    assert {e["kind"] for e in data["events"]} >= {"fault", "restore"}
    assert (tmp_path / "junit.xml").exists()
    assert ET.parse(tmp_path / "junit.xml").getroot().get("failures") == "0"
    (html,) = tmp_path.glob("*.html")
    assert html.read_text().count("<svg") == 4


def test_a_fault_that_cannot_be_injected_is_exit_3(system: UpSystem, tmp_path: Path) -> None:
    result = system.drill(FILES / "cannot-inject.yaml", tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    data = journal(tmp_path)
    assert data["verdict"] == "error" and "no-such-process" in data["reason"]
    faults = {f["id"]: f for f in data["faults"]}
    assert faults["no-such-process"]["t_start"] is None
    assert faults["no-such-process"]["calls"][0]["status"] == 400
    frozen = faults["freeze-ap-south"]
    assert frozen["t_start"] is not None and frozen["restored"], frozen
    assert frozen["calls"][-1]["body"] == {"action": "restore",
                                           "names": ["balancer/ap-south"]}


def test_dry_run_resolves_targets_and_injects_nothing(system: UpSystem, tmp_path: Path) -> None:
    result = system.drill(ROOT / "drills" / "all-eu-down.yaml", tmp_path, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert '"names": ["balancer/eu-west", "gpu/eu-west/*", "balancer/eu-central", ' \
           '"gpu/eu-central/*"]' in result.stdout
    assert "nothing injected" in result.stdout
    assert not list(tmp_path.glob("*.json"))


def processes(system: UpSystem) -> dict[str, str]:
    request = urllib.request.Request(system.api + "/api/v1/processes",
                                     headers={"Authorization": f"Bearer {system.token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return {p["name"]: p["state"] for p in json.loads(response.read())["processes"]}


def test_ctrl_c_aborts_and_restores(system: UpSystem, tmp_path: Path) -> None:
    """SIGINT while eu-west is killed: exit 2 (aborted), and eu-west is restored by the
    runner, long before the fault's dead-man ttl. The CI drill with a steady phase of 2 s
    rather than 10 s: the signal comes once the kill is on, and nothing before it is
    judged but the steady-state health check (still read as the kill starts)."""
    short = drill_variant(ROOT / "drills" / "ci-kill-eu-west.yaml",
                          tmp_path / "ci-kill-eu-west-short.yaml",
                          (("{name: steady, duration: 10s}", "{name: steady, duration: 2s}"),))
    drill = subprocess.Popen(
        [sys.executable, "-m", "director", "drill", "run", str(short), "--target", system.api,
         "--token", system.token, "--report-dir", str(tmp_path / "reports"), "--no-live"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and processes(system)["balancer/eu-west"] != "held":
            time.sleep(0.2)
        assert processes(system)["balancer/eu-west"] == "held"
        drill.send_signal(signal.SIGINT)
        output, _ = drill.communicate(timeout=60)
    finally:
        if drill.poll() is None:
            drill.kill()
    assert drill.returncode == 2, output
    assert processes(system)["balancer/eu-west"] != "held"
    data = journal(tmp_path / "reports")
    assert data["verdict"] == "aborted" and "SIGINT" in data["reason"]
    (fault,) = data["faults"]
    assert fault["restored"] and fault["t_end"] < fault["planned_end"]
