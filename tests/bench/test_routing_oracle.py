# SPDX-License-Identifier: Apache-2.0
"""The omniscient schedulers of ``bench/routing_oracle.py``: they serve every request, never
bind more than a GPU's slots, and place by the rule they state."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import routing_oracle  # noqa: F401  (registers the oracle setups)
from replay_checks import most_bound_at_once, replay_counted
from routing_trace import Arrival

SLOW = {"gpu4", "gpu5"}  # speed 0.4
FAST = {"gpu0", "gpu1"}  # speed 1.0


@pytest.mark.parametrize("setup", ["oracle-ttft:T=0.3", "oracle-ttft:T=0.1+E=16+long=333+L=1",
                                   "oracle-fit:E=16+F=0.35", "oracle-fit:E=16+F=0.35+W=0.5"])
def test_an_oracle_serves_every_request_of_a_saturating_burst(setup: str) -> None:
    """200 requests in 1 s, far past the fleet's 96 slots: all are served, in full."""
    arrivals = [Arrival(i * 0.005, 300 + 50 * (i % 40), 10 + 7 * (i % 45)) for i in range(200)]
    counted, _ = replay_counted(setup, arrivals, 10.0)
    assert len(counted) == 200
    assert all(r.output_tokens == a.output_tokens for r, a in zip(counted, arrivals, strict=True))
    assert any(r.queued > 0 for r in counted)  # some waited in the central queue
    assert most_bound_at_once(counted) <= 16


def test_best_fit_keeps_long_answers_off_the_slow_gpus_and_short_ones_on_them() -> None:
    """600 tokens take 19 s on a 0.6 GPU at a full batch (over E=16): only the 1.0 GPUs.
    A short answer to a short prompt fits the 0.4 GPUs, which are free: it goes there."""
    arrivals = [Arrival(i * 0.5, 800, 600 if i % 2 else 20) for i in range(20)]
    counted, _ = replay_counted("oracle-fit:E=16+F=0.35", arrivals, 100.0)
    long = {r.backend for r in counted if r.output_tokens == 600}
    short = {r.backend for r in counted if r.output_tokens == 20}
    assert long <= FAST and short <= SLOW
