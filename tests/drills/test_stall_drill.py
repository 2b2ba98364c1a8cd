# SPDX-License-Identifier: Apache-2.0
"""The stream-stalls drill against ``director up --simulate`` with the degradation drill
policy (drills/degrade.dp): a tenth of eu-west's streams go silent mid-answer, the
balancer resumes them on other servers, every request completes, nothing is lost and EU
clients are only answered in EU regions."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.drills.up_system import ROOT, UpSystem, director_up, drill_variant

pytestmark = pytest.mark.long

DRILL = ROOT / "drills" / "stream-stalls.yaml"
POLICY = ROOT / "drills" / "degrade.dp"
# The shipped drill with shorter idle phases (39 s of load, not 50 s): a steady phase of 3 s
# (only the steady-state health check reads it, from the status as the stalls start) and an
# "after" of 1 s (no check reads it; a stream stalled late is still resumed within the
# drain). The stalls keep their 35 s: a simulated server stalls the streams its seeded
# random draw picks (Random(0): its 36th, 46th, 51st... stream in stall mode), and 35 s of
# eu-west's share of the load give each of its three servers only ~40 streams, so a
# shorter stall phase sees no stall at all. With the seeded schedule the stall phase holds
# 136 requests (123 of them eu-west's) against 135 (122): all-complete (>= 0.99) still
# tolerates one failure and no second, and the balancer has learned each server's silence
# bound (20 whole streams) before its first stall, as before.
SHORTER = (("{name: steady, duration: 10s}", "{name: steady, duration: 3s}"),
           ("{name: after, duration: 5s}", "{name: after, duration: 1s}"))
RESUMED = re.compile(r'^director_balancer_stream_resumes_total\{outcome="resumed",'
                     r'reason=""\} (\S+)$', re.MULTILINE)


def resumed(system: UpSystem) -> float:
    """Streams the region balancers resumed, from their admin listeners' metrics."""
    up = json.dumps(json.loads((system.run_dir / "up.json").read_text()))
    total = 0.0
    for admin in set(re.findall(r"admin (http://[0-9.:]+)", up)):
        with urllib.request.urlopen(admin + "/metrics", timeout=10) as response:
            total += sum(float(v) for v in RESUMED.findall(response.read().decode()))
    return total


def test_streams_that_stall_mid_answer_are_resumed_and_complete(tmp_path_factory,
                                                                  tmp_path: Path) -> None:
    with director_up(tmp_path_factory.mktemp("up"), POLICY) as system:
        drill = drill_variant(DRILL, tmp_path / "stream-stalls-short.yaml", SHORTER)
        result = system.drill(drill, tmp_path / "reports")
        (path,) = (tmp_path / "reports").glob("*.json")
        data = json.loads(path.read_text())
        checks = {c["name"]: c for c in data["checks"]}
        assert result.returncode == 0, result.stdout + result.stderr + system.log()
        assert data["verdict"] == "passed" and all(c["passed"] for c in checks.values())
        assert checks["all-complete"]["value"] >= 0.99
        assert checks["residency-held"]["value"] == 0
        assert resumed(system) >= 1
