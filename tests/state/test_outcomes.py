"""Answer counts by revision (``state.outcomes``): quantiles within the bounds' 10 %,
windows that subtract, regions that add, resets, and the stored form."""

from __future__ import annotations

import random

import pytest

from state.errors import RecordError
from state.outcomes import BOUND_RATIO, Outcomes


def exact_quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.parametrize("seed", range(4))
def test_quantiles_are_within_a_bound_step_of_the_samples(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(-1.5 + seed * 0.5, 0.8) for _ in range(3000)]
    outcomes = Outcomes()
    for v in values:
        outcomes.record(ok=True, ttft_s=v)
    for q in (0.5, 0.9, 0.95, 0.99):
        got, want = outcomes.quantile("ttft", q), exact_quantile(values, q)
        assert got is not None and want / BOUND_RATIO <= got <= want * BOUND_RATIO, (q, got, want)
    assert outcomes.quantile("itl", 0.95) is None and outcomes.samples("ttft") == 3000


def test_windows_subtract_regions_add_and_a_reset_counts_whole() -> None:
    start, later = Outcomes(), Outcomes()
    for o in (start, later):
        for _ in range(10):
            o.record(ok=True, ttft_s=0.1, itl_s=0.02, finish="stop", output_tokens=20)
    for _ in range(5):
        later.record(ok=False, ttft_s=2.0)
        later.record(ok=True, ttft_s=0.1, finish="length", output_tokens=64)
    window = later.minus(start)
    assert (window.requests, window.errors, window.answered, window.output_tokens) == (
        10, 5, 5, 320)
    assert window.finish == {"length": 5} and window.samples("ttft") == 10
    assert window.error_rate() == 0.5 and window.mean_output_tokens() == 64
    assert window.finish_shares() == {"length": 1.0}
    both = window.plus(window)
    assert (both.requests, both.finish, both.samples("ttft")) == (20, {"length": 10}, 20)
    restarted = Outcomes()  # a balancer that restarted: fewer than the window's start
    restarted.record(ok=True, ttft_s=0.3)
    assert restarted.minus(later).requests == 1


def test_the_stored_form_round_trips_and_garbage_is_refused() -> None:
    outcomes = Outcomes()
    outcomes.record(ok=True, ttft_s=0.25, itl_s=0.01, finish="stop", output_tokens=7)
    outcomes.record(ok=False)
    assert Outcomes.from_json(outcomes.to_json()) == outcomes
    for bad in ("not json", "[]", '{"requests": -1}', '{"requests": true}',
                '{"ttft": {"x": 1}}', '{"finish": {"stop": 1.5}}', '{"itl": []}'):
        with pytest.raises(RecordError):
            Outcomes.from_json(bad)
