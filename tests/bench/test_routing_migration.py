# SPDX-License-Identifier: Apache-2.0
"""Stream migration in ``bench/routing_migration.py``: a moved answer arrives whole and
sooner, and a burst past the fleet's slots is served in full while streams move."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import routing_migration  # noqa: F401  (registers the migrate setups)
from replay_checks import replay_counted
from routing_trace import Arrival

SLOW = {"gpu4", "gpu5"}  # speed 0.4


def test_a_long_answer_placed_on_a_slow_gpu_moves_to_a_fast_one_and_arrives_whole() -> None:
    """80 answers of 150 tokens fill the fast GPUs first; an 800-token answer then lands on a
    0.4 GPU (25.8 s there). When the fast GPUs' slots free, it moves: the same 800 tokens,
    in about half the time."""
    arrivals = [Arrival(0.01 * i, 500, 150) for i in range(80)] + [Arrival(0.9, 500, 800)]
    staying, _ = replay_counted("oracle-ttft:T=0.3", arrivals, 100.0)
    moving, note = replay_counted("migrate:T=0.3+M=0.5", arrivals, 100.0)
    long_staying = next(r for r in staying if r.output_tokens == 800)
    long_moving = next(r for r in moving if r.output_tokens == 800)
    assert long_staying.backend in SLOW and long_moving.backend in SLOW  # where each began
    assert "moves 0]" not in note
    assert long_moving.e2e < 0.6 * long_staying.e2e
    assert [r.output_tokens for r in moving] == [a.output_tokens for a in arrivals]


@pytest.mark.parametrize("setup", ["migrate:T=0.1", "migrate:T=0.1+Q=1+M=0.5",
                                   "migrate:T=0.1+H=1+M=0.5"])
def test_a_saturating_burst_is_served_in_full_while_streams_move(setup: str) -> None:
    arrivals = [Arrival(i * 0.005, 300 + 50 * (i % 40), 10 + 23 * (i % 45)) for i in range(200)]
    counted, note = replay_counted(setup, arrivals, 30.0)
    assert len(counted) == 200
    assert all(r.output_tokens == a.output_tokens for r, a in zip(counted, arrivals, strict=True))
    assert "moves 0]" not in note
