# SPDX-License-Identifier: Apache-2.0
"""The ``size-aware`` scorer: what its window learns, how it sizes requests, its score
table and its late-binding answers (``hold_s``, ``precedence_s``)."""

from __future__ import annotations

import pytest

from regions.balancer.scheduling.finish_time import finish_s
from regions.balancer.scheduling.scorers.size_aware import SizeAwareScorer, SizeWindow
from tests.balancer.helpers import req, snap

# Declared lengths, as a replayed trace sends them: 1/2 short, 1/4 mid, 1/4 long.
DECLARED = [50, 80, 100, 120] * 2 + [400, 420] * 2 + [600, 650] * 2


def sized(output: int, prompt_cost: float = 10.0, cap: int | None = None):
    """A request of ``output`` tokens (``max_tokens`` = ``cap``, default ``output``)."""
    cap = output if cap is None else cap
    return req(max_tokens=cap, output_tokens=float(output), cost_tokens=prompt_cost + output)


def window(**kw) -> SizeWindow:
    return SizeWindow(min_samples=4, refresh=1, **kw)


def trained(caps=DECLARED, rates=(("fast", 100.0), ("slow", 40.0)), **kw) -> SizeAwareScorer:
    """A scorer that has seen ``caps`` declared at face value and the given backend rates."""
    scorer = SizeAwareScorer(window=window(), **kw)
    for name, rate in rates:
        scorer.on_bind(req(), snap(name, tokens_per_s=rate))
    for cap in caps:
        scorer.refine(sized(cap))
    return scorer


# -- window and sizing ---------------------------------------------------------------------


def test_window_abstains_until_sizes_differ() -> None:
    w = window()
    w.observe_rate("b0", 50.0)
    for _ in range(10):
        w.observe(10.0, 1000.0)  # one cap for all, nothing learned: nothing to sort by
    assert w.reference() is None
    for cap in DECLARED:
        w.observe(10.0, float(cap))
    assert w.reference() == (1010.0, 50.0)  # q95 of the sizes (prompt included), fastest


def test_window_needs_samples_and_a_rate() -> None:
    w = SizeWindow(min_samples=8, refresh=1)
    for cap in DECLARED[:7]:
        w.observe(0.0, float(cap))
    assert w.reference() is None  # rates unknown, and too few requests
    w.observe_rate("b0", 10.0)
    w.observe(0.0, 600.0)
    assert w.reference() is not None


def test_refine_records_the_prediction_and_changes_nothing() -> None:
    scorer = trained()
    long = req(max_tokens=1000, output_tokens=350.0, cost_tokens=360.0)
    assert scorer.refine(long) is long
    assert scorer.window._seen[-1] == (10.0, 350.0)
    hidden = SizeAwareScorer(window=window())
    hidden.on_bind(req(), snap("b0"))
    for _ in range(40):
        r = req(max_tokens=1000, output_tokens=1000.0, cost_tokens=1010.0)
        assert hidden.refine(r) is r
    assert hidden.budget_s() is None  # every request looks alike: the scorer abstains


# -- score -----------------------------------------------------------------------------------

FAST = snap("fast", 0, tokens_per_s=100.0, cap=16)
SLOW = snap("slow", 1, tokens_per_s=40.0, cap=16)


@pytest.mark.parametrize(
    ("output", "candidates", "expected"),
    [
        # budget = 1.5 * q95 size (660) / 100 = 9.9 s
        (80, [FAST, SLOW], [1.0, 1.0]),  # 2.25 s on the slow one: fine anywhere
        (350, [FAST, SLOW], [1.0, 1.0]),  # 9.0 s slow: still within the budget
        (600, [FAST, SLOW], [1.0, 0.5 * 6.1 / 15.25]),  # 15.25 s slow: only the fast one
        (600, [SLOW], [1.0]),  # the only candidate: nearest the best by definition
        (
            80,
            [snap("fast", 0, tokens_per_s=100.0, cap=16, in_flight=16, prefetch=1), SLOW],
            [0.5, 1.0],  # a free slot beats waiting at the server
        ),
    ],
    ids=["short", "mid", "long", "long-alone", "prefetch"],
)
def test_score_table(output, candidates, expected) -> None:
    scorer = trained()
    got = scorer.score(sized(output), candidates)
    assert got == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize(
    ("prompt_cost", "expected"),
    [
        # a median prompt (10) prefills in 0.25 s on the slow one: limit 1.5 * 0.25 s
        (12.0, [1.0, 1.0]),  # 0.3 s on the slow one: fine
        (40.0, [1.0, 0.5 * 1.2 / 3.0]),  # 1.0 s there, 0.4 s on the fast one: only fast
    ],
    ids=["typical-prompt", "long-prompt"],
)
def test_a_long_prompt_avoids_a_slow_prefill(prompt_cost: float, expected: list[float]) -> None:
    scorer = trained()
    assert scorer.window.typical_first_s() == pytest.approx(10.0 / 40.0)
    got = scorer.score(sized(80, prompt_cost=prompt_cost), [FAST, SLOW])
    assert got == pytest.approx(expected, rel=0.05)


def test_first_token_rule_keeps_the_soonest_within_first_kappa() -> None:
    """Every backend slow to prefill this prompt: those within first_kappa of the soonest."""
    scorer = trained(first_kappa=2.0)
    mid = snap("mid", 2, tokens_per_s=60.0, cap=16)
    got = scorer.score(sized(80, prompt_cost=100.0), [FAST, mid, SLOW])
    # prefill 1.0 / 1.67 / 2.5 s: the slow one is beyond 2 x 1.0 s
    assert got[:2] == [1.0, 1.0] and got[2] < 1.0


def test_first_token_counts_the_prompts_already_waiting_to_prefill() -> None:
    """A backend whose queued prompts have not prefilled yet starts a new one after them:
    a burst of long prompts spreads instead of piling onto the backend that looked free."""
    scorer = trained()
    typical = snap("slow2", 2, tokens_per_s=40.0, cap=16)
    backlogged = snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=3, prefill_tokens=30.0)
    # a median prompt (10): 0.25 s on the idle slow one, 1.0 s behind the backlog
    got = scorer.score(sized(80, prompt_cost=10.0), [FAST, backlogged, typical])
    assert got[0] == 1.0 and got[2] == 1.0 and got[1] < 1.0
    # without the backlog the same backend is acceptable
    idle = snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=3)
    assert scorer.score(sized(80, prompt_cost=10.0), [FAST, idle, typical])[1] == 1.0


def test_score_abstains_without_size_information() -> None:
    scorer = trained(caps=[1000] * 20)
    assert scorer.score(sized(600), [FAST, SLOW]) == [1.0, 1.0]
    assert scorer.hold_s(sized(600), SLOW, [FAST, SLOW]) == 0.0
    assert scorer.precedence_s(sized(600)) == 0.0


def test_finish_counts_the_wait_behind_a_full_batch() -> None:
    b = snap(in_flight=18, cap=16, work_tokens=1800.0, tokens_per_s=50.0)
    # job 100 tokens / 50 tok/s = 2 s; 3 ahead of it for 16 slots: 3 * 2 / 16 s
    assert finish_s(b, 100.0) == pytest.approx(3 * 2.0 / 16 + 2.0)
    assert finish_s(snap(in_flight=3, cap=16, tokens_per_s=50.0), 100.0) == 2.0


# -- late binding -----------------------------------------------------------------------------


def full(name: str, index: int, rate: float, work: float = 17 * 400.0):
    return snap(name, index, tokens_per_s=rate, cap=16, prefetch=1, in_flight=17, work_tokens=work)


@pytest.mark.parametrize(
    ("output", "chosen", "eligible", "expected"),
    [
        (80, SLOW, [full("fast", 0, 100.0), SLOW], 0.0),  # short: the slow one is fine
        (600, SLOW, [FAST, SLOW], 0.0),  # the fast one has a slot: not a hold
        (
            600,
            snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=10),
            [full("fast", 0, 100.0), snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=10)],
            0.0,  # 26 of 32 slots in use: not busy enough to hold
        ),
        (
            600,
            snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=15),
            [full("fast", 0, 100.0), snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=15)],
            6.1 + 2 * 4.0 / 16,  # busy; wait for the fast one, up to its finish (hold 1.0)
        ),
    ],
    ids=["short", "fast-has-slot", "not-busy", "hold"],
)
def test_hold_table(output, chosen, eligible, expected) -> None:
    scorer = trained(hold=1.0)  # the hold is opt-in
    request = sized(output)
    assert scorer.acceptable(request, chosen) == (finish_s(chosen, request.cost_tokens) <= 9.9)
    assert scorer.hold_s(request, chosen, eligible) == pytest.approx(expected)


def test_hold_first_caps_a_hold_at_typical_prefills() -> None:
    """With hold_first, a hold lasts no longer than that many median prompts' prefill on the
    slowest GPU (10 tokens / 40 tok/s = 0.25 s here); off by default."""
    chosen = snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=15)
    eligible = [full("fast", 0, 100.0), chosen]
    uncapped = 6.1 + 2 * 4.0 / 16
    assert trained(hold=1.0).hold_s(sized(600), chosen, eligible) == pytest.approx(uncapped)
    assert trained(hold=1.0, hold_first=2).hold_s(sized(600), chosen, eligible) == \
        pytest.approx(2 * 0.25)
    assert trained(hold=1.0, hold_first=40).hold_s(sized(600), chosen, eligible) == \
        pytest.approx(uncapped)
    assert trained().hold_s(sized(600), chosen, eligible) == 0.0  # off by default


def test_precedence_is_lead_times_service_on_the_fastest() -> None:
    scorer = trained(lead=0.5)
    assert scorer.precedence_s(sized(600)) == pytest.approx(0.5 * 610 / 100)
    assert trained(lead=0.0).precedence_s(sized(600)) == 0.0


@pytest.mark.parametrize(
    "kw",
    [
        {"slack": 0},
        {"kappa": 0.9},
        {"busy": 1.5},
        {"hold": -1},
        {"lead": -0.1},
        {"hold_first": -1},
        {"first_hold": -1},
    ],
    ids=["slack", "kappa", "busy", "hold", "lead", "hold_first", "first_hold"],
)
def test_parameters_are_checked(kw) -> None:
    with pytest.raises(ValueError, match="size-aware"):
        SizeAwareScorer(**kw)
    with pytest.raises(ValueError, match="size window"):
        SizeWindow(spread=0.5)


# -- first-token holds ------------------------------------------------------------------------

BUSY_FAST = snap("fast", 0, tokens_per_s=100.0, cap=16, in_flight=16, work_tokens=16 * 400.0)


def slow(in_flight: int):
    return snap("slow", 1, tokens_per_s=40.0, cap=16, in_flight=in_flight)


@pytest.mark.parametrize(
    ("prompt_cost", "chosen", "eligible", "first_hold", "expected"),
    [
        # the fast one is full: a slot in 1 * 4 s / 16 = 0.25 s, then 80 / 100 s of prefill
        # (1.05 s), against 80 / 40 = 2 s on the slow one: over 1.5 x 1.05 s, so wait
        (80.0, slow(15), [BUSY_FAST, slow(15)], 1.0, 0.25 + 0.8),
        (80.0, slow(15), [BUSY_FAST, slow(15)], 2.0, 2 * (0.25 + 0.8)),
        (80.0, slow(15), [BUSY_FAST, slow(15)], 0.0, 0.0),  # off
        (80.0, slow(15), [FAST, slow(15)], 1.0, 0.0),  # the fast one has a free slot
        (80.0, slow(5), [BUSY_FAST, slow(5)], 1.0, 0.0),  # 21 of 32 slots: not busy
        (10.0, slow(15), [BUSY_FAST, slow(15)], 1.0, 0.0),  # a median prompt: 0.25 s
    ],
    ids=["hold", "hold-2", "off", "fast-has-slot", "not-busy", "median-prompt"],
)
def test_first_token_hold_table(prompt_cost, chosen, eligible, first_hold, expected) -> None:
    """A prompt that would prefill far later on the free slow backend than on the full
    fast one (after its wait) waits for the fast one, up to ``first_hold`` times that."""
    scorer = trained(first_hold=first_hold)
    request = sized(80, prompt_cost=prompt_cost)
    assert scorer.hold_s(request, chosen, eligible) == pytest.approx(expected)
    # ``acceptable`` (the dispatcher's cheap check) lets through what never holds
    if not expected and first_hold and prompt_cost <= 10.0:
        assert scorer.acceptable(request, chosen)
