# SPDX-License-Identifier: Apache-2.0
"""The central-queue dispatch of ``bench/routing_sjf.py``: every request served, in the order
and on the GPUs its rule states."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import routing_sjf  # noqa: F401  (registers the sjf setups)
from replay_checks import most_bound_at_once, replay_counted
from routing_trace import Arrival

FAST = {"gpu0", "gpu1"}  # speed 1.0


@pytest.mark.parametrize("setup", ["sjf:E=16", "sjf:S=0+P=1+E=16+R=4+L=450+W=5"])
def test_a_saturating_burst_is_served_in_full_never_past_a_gpus_slots(setup: str) -> None:
    arrivals = [Arrival(i * 0.005, 300 + 50 * (i % 40), 10 + 7 * (i % 45)) for i in range(200)]
    counted, _ = replay_counted(setup, arrivals, 10.0)
    assert len(counted) == 200
    assert all(r.output_tokens == a.output_tokens for r, a in zip(counted, arrivals, strict=True))
    assert most_bound_at_once(counted) <= 16


def test_shortest_answer_first_once_the_fleet_is_full() -> None:
    """96 long answers fill every slot and end one step apart; of the requests that queue
    behind them, the short ones start first, one per freed slot."""
    fill = [Arrival(0.001 * i, 100, 400 + i) for i in range(96)]
    queued = [Arrival(0.2 + 0.001 * i, 100, 300 - 25 * i) for i in range(10)]
    counted, _ = replay_counted("sjf:E=1000+A=100+W=100", fill + queued, 100.0)
    waited = sorted((r for r in counted if r.at >= 0.2), key=lambda r: r.at + r.queued)
    assert len({r.at + r.queued for r in waited}) == 10  # no two started together
    assert [r.output_tokens for r in waited] == sorted(r.output_tokens for r in waited)


def test_slots_held_back_on_the_fast_gpus_go_to_long_answers_only() -> None:
    """With R=4, short answers stop at 12 per fast GPU; the long one that comes after them
    still finds a fast slot at once."""
    short = [Arrival(0.001 * i, 100, 50) for i in range(60)]
    long = Arrival(0.1, 100, 700)
    counted, _ = replay_counted("sjf:S=0+P=1+E=1000+R=4+L=450", [*short, long], 100.0)
    at_start = [r for r in counted if r.output_tokens == 50 and r.backend in FAST
                and r.at + r.queued < 0.1]
    assert all(sum(1 for r in at_start if r.backend == gpu) <= 12 for gpu in FAST)
    late = next(r for r in counted if r.output_tokens == 700)
    assert late.backend in FAST and late.queued == 0
