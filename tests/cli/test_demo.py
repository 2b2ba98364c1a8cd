"""``./run demo``: the example policy's proof, and sample answers in which every scenario
shows its effect (the spillover one included)."""

from __future__ import annotations

import subprocess
import sys


def test_demo_shows_failover_all_down_and_spillover() -> None:
    result = subprocess.run([sys.executable, "-m", "director.demo"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "0 violations" in out
    scenarios = out.split("\n\n")
    spill = next(s for s in scenarios if s.startswith("us-east at 150%"))
    assert "(spillover)" in spill  # a sample client that moved is shown
    moved = spill.splitlines()[1].split()
    assert moved[1:4] == ["of", "256", "US"] and 0 < int(moved[0]) < 256
    assert "(failover)" in next(s for s in scenarios if s.startswith("eu-central down"))
    assert "(all-down)" in next(s for s in scenarios if s.startswith("every EU region down"))
