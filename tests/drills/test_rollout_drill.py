# SPDX-License-Identifier: Apache-2.0
"""The canary-rollback drill against ``director up --simulate`` with the rollout drill
policy (drills/rollouts.dp): a rollout of a four times slower candidate revision starts
through the admin API, the controller rolls it back within two analysis intervals, EU
clients are only answered in EU regions, nothing is lost, and the drill's restore leaves
no rollout behind."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.drills.up_system import ROOT, UpSystem, director_up, drill_variant

pytestmark = pytest.mark.long

DRILL = ROOT / "drills" / "canary-rollback.yaml"
POLICY = ROOT / "drills" / "rollouts.dp"
# The shipped drill, shorter where nothing is judged (39 s of load, not 58 s): a steady
# phase of 3 s (only the steady-state health check reads it, from the status as the
# rollout starts: the gates compare the two revisions over the same window), an "after" of
# 1 s (no check reads it), and a rollout of 35 s rather than 45 s. The rollout (34 s from
# its start, a second into the phase) still outlasts what the rolled-back check allows
# (33 s: two 15 s intervals, the controller's tick and the status poll), so a controller
# that rolls back late, or never (the 50 % step at 15 s, 100 % at 30 s), still fails it;
# the interval, gates, rate and slowdown are the drill's own, and all-complete (>= 0.99)
# judges some 270 requests rather than 360.
SHORTER = (("{name: steady, duration: 8s}", "{name: steady, duration: 3s}"),
           ("{name: rollout, duration: 45s}", "{name: rollout, duration: 35s}"),
           ("{name: after, duration: 5s}", "{name: after, duration: 1s}"),
           ("    duration: 45s\n    params: {factor: 4}",
            "    duration: 35s\n    params: {factor: 4}"),
           ("    duration: 44s\n", "    duration: 34s\n"))


def api(system: UpSystem, path: str) -> Any:
    request = urllib.request.Request(system.api + path,
                                     headers={"Authorization": f"Bearer {system.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_a_slow_canary_is_rolled_back_within_two_intervals(tmp_path_factory,
                                                            tmp_path: Path) -> None:
    with director_up(tmp_path_factory.mktemp("up"), POLICY) as system:
        drill = drill_variant(DRILL, tmp_path / "canary-rollback-short.yaml", SHORTER)
        started = time.monotonic()
        result = system.drill(drill, tmp_path / "reports")
        assert time.monotonic() - started < 120  # 39 s of load, 10 s of drain, a CLI start
        (path,) = (tmp_path / "reports").glob("*.json")
        data = json.loads(path.read_text())
        checks = {c["name"]: c for c in data["checks"]}
        assert result.returncode == 0, result.stdout + result.stderr + system.log()
        assert data["verdict"] == "passed" and all(c["passed"] for c in checks.values())
        rolled = checks["rolled-back"]
        assert rolled["value"] <= 33 and "rolled-back" in rolled["detail"]
        assert checks["candidate-share"]["value"] < 0.3
        assert checks["residency-held"]["value"] == 0
        # the restore took the rollout away, and the policy's split (all on r1) is back
        assert api(system, "/api/v1/rollouts")["rollouts"] == []
        audit = [json.loads(line)["action"] for line in
                 (system.run_dir / "audit.log").read_text().splitlines()]
        assert {"rollout.start", "rollout.clear", "chaos.gpu_fault"} <= set(audit)
