# SPDX-License-Identifier: Apache-2.0
"""The ``expected-finish`` scorer, reading each backend's time per token at a concurrency
(``fleet_speed.FleetSpeed``'s lines): table tests with ids."""

from __future__ import annotations

import pytest

from regions.balancer.scheduling.scorers.expected_finish import ExpectedFinishScorer, finish_s
from tests.balancer.helpers import req, snap

FAST = dict(tokens_per_s=80.0, spt_base=0.0125, spt_slope=0.0005, cap=64)


@pytest.mark.parametrize(("candidates", "best"), [
    ([snap("idle", 0, in_flight=0, **FAST), snap("busy", 1, in_flight=30, **FAST)], "idle"),
    ([snap("fast", 0, in_flight=20, **FAST),
      snap("slow", 1, in_flight=2, tokens_per_s=20.0, spt_base=0.05, spt_slope=0.002, cap=64)],
     "fast"),  # deeper batch, still sooner than the slow GPU
    ([snap("deep", 0, in_flight=200, **{**FAST, "cap": 256}),
      snap("small", 1, in_flight=10, **{**FAST, "cap": 16})],
     "small"),  # a deep batch is slow for every stream in it
    ([snap("full", 0, in_flight=40, work_tokens=40 * 300.0, **{**FAST, "cap": 16}),
      snap("room", 1, in_flight=15, **{**FAST, "cap": 16})],
     "room"),  # waiting for a slot counts
], ids=["idle-wins", "speed-beats-depth", "depth-is-slow", "a-full-one-waits"])
def test_the_soonest_finish_scores_one(candidates, best: str) -> None:
    scores = ExpectedFinishScorer().score(req(output_tokens=200.0, cost_tokens=210.0),
                                          candidates)
    assert max(scores) == 1.0
    assert candidates[scores.index(1.0)].name == best
    assert all(0 < s <= 1 for s in scores)


def test_before_the_model_is_fitted_the_plain_rate_stands_in() -> None:
    b = snap("b", 0, in_flight=3, tokens_per_s=50.0, cap=16)
    assert finish_s(req(output_tokens=100.0, cost_tokens=100.0), b) == pytest.approx(100 / 50)


def test_late_binding_holds_for_a_full_backend_that_would_finish_far_sooner() -> None:
    scorer = ExpectedFinishScorer(hold=1.5)
    deep = snap("deep", 0, in_flight=200, **{**FAST, "cap": 256})
    small = snap("small", 1, in_flight=16, work_tokens=16 * 100.0, **{**FAST, "cap": 16})
    request = req(output_tokens=200.0, cost_tokens=210.0)
    assert not scorer.acceptable(request, deep)
    held = scorer.hold_s(request, deep, [deep, small])
    assert held == pytest.approx(finish_s(request, deep) - finish_s(request, small))
    assert held > 0
    assert scorer.hold_s(request, small, [deep, small]) == 0.0
    assert ExpectedFinishScorer().acceptable(request, deep)  # off by default
    with pytest.raises(ValueError, match="hold"):
        ExpectedFinishScorer(hold=0.5)
