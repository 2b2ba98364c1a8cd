# SPDX-License-Identifier: Apache-2.0
"""The routing benchmark's load: a slice offers its share of capacity in work, not requests."""

from __future__ import annotations

import pytest

from benchkit.routing_trace import TraceRequest, arrivals_at_load, work_seconds
from regions.simulator.config import EngineConfig

CONFIG = EngineConfig()

def _trace() -> list[TraceRequest]:
    """5,000 short answers, then 5,000 long ones, one request a second."""
    short = [TraceRequest(float(i), 1000, 50) for i in range(5000)]
    long = [TraceRequest(float(5000 + i), 1000, 500) for i in range(5000)]
    return short + long

@pytest.mark.parametrize("load", [0.7, 0.9])
def test_a_slice_of_long_answers_gets_a_lower_rate_than_a_slice_of_short_ones(load: float) -> None:
    trace = _trace()
    short = arrivals_at_load(trace, 0, load, 10.0, until=50.0, span=80.0)
    long = arrivals_at_load(trace, 5000, load, 10.0, until=50.0, span=80.0)
    assert short.demand == pytest.approx(load, rel=0.01)
    assert long.demand == pytest.approx(load, rel=0.01)
    ratio = work_seconds(1000, 500, CONFIG) / work_seconds(1000, 50, CONFIG)
    assert short.rate / long.rate == pytest.approx(ratio, rel=0.03)

def test_demand_counts_the_work_arriving_before_until() -> None:
    trace = _trace()
    piece = arrivals_at_load(trace, 0, 0.5, 10.0, until=40.0, span=60.0)
    work = sum(
        work_seconds(a.prompt_tokens, a.output_tokens, CONFIG)
        for a in piece.arrivals
        if a.at < 40.0
    )
    mean = sum(work_seconds(r.prompt_tokens, r.output_tokens, CONFIG) for r in trace) / len(trace)
    assert piece.demand == pytest.approx(work / 40.0 / (10.0 * mean))
    assert piece.arrivals[-1].at <= 60.0 + 1e-6
