# SPDX-License-Identifier: Apache-2.0
"""The long-answer bound: the fast and medium GPUs' 64 slots, first come first served."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from routing_phases import full_batch_step_s, late_and_forced, split_fleet
from routing_trace import Arrival

from regions.simulator.config import EngineConfig


def test_the_full_batch_step_is_the_simulators() -> None:
    assert abs(full_batch_step_s(1.0, EngineConfig()) - 0.0192) < 1e-12
    assert abs(full_batch_step_s(0.4, EngineConfig()) - 0.048) < 1e-12


def test_a_long_answer_is_late_only_once_every_fast_and_medium_slot_is_taken() -> None:
    config = EngineConfig()
    crowd = [Arrival(20.0, 1000, 400) for _ in range(64)]  # one per slot, none waits
    assert late_and_forced(crowd, (15.0, 135.0), 300, 0.5, 16.0, config) == (64, 0, 0)
    # the 65th waits for the first slot to free (a fast one: 400 * 19.2 ms = 7.7 s)
    # and at 400 * 48 ms = 19.2 s on a 0.4 GPU it misses a 16 s goal there too
    one_more = [*crowd, Arrival(20.0, 1000, 400)]
    assert late_and_forced(one_more, (15.0, 135.0), 300, 0.5, 16.0, config) == (65, 1, 1)
    # a short answer never counts, and an uncounted arrival still takes its slot (a fast
    # one, until 14 + 7.7 s)
    warmup = [Arrival(14.0, 1000, 400), *crowd, Arrival(20.0, 1000, 100)]
    assert late_and_forced(warmup, (15.0, 135.0), 300, 0.5, 16.0, config) == (64, 1, 1)


def test_the_split_sends_long_prompts_to_the_fast_pool_and_counts_misses() -> None:
    config = EngineConfig()
    arrivals = [
        Arrival(20.0, 4000, 50),  # a long prompt: the fast pool, 4000 / 16000 s to prefill
        Arrival(20.0, 2000, 50),  # the slowest pool: 2000 / 6400 = 0.31 s to prefill
        Arrival(20.0, 500, 400),  # a long answer: the fast pool
    ]
    big, small = split_fleet(arrivals, (15.0, 135.0), 300, 3000, 0.3, 16.0, config)
    assert (big.requests, big.ttft_misses, big.e2e_misses) == (2, 0, 0)
    assert (small.requests, small.ttft_misses, small.e2e_misses) == (1, 1, 0)
