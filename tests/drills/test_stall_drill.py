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

from tests.drills.up_system import ROOT, UpSystem, director_up

DRILL = ROOT / "drills" / "stream-stalls.yaml"
POLICY = ROOT / "drills" / "degrade.dp"
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
        result = system.drill(DRILL, tmp_path)
        (path,) = tmp_path.glob("*.json")
        data = json.loads(path.read_text())
        checks = {c["name"]: c for c in data["checks"]}
        assert result.returncode == 0, result.stdout + result.stderr + system.log()
        assert data["verdict"] == "passed" and all(c["passed"] for c in checks.values())
        assert checks["all-complete"]["value"] >= 0.99
        assert checks["residency-held"]["value"] == 0
        assert resumed(system) >= 1
