"""A rollout step's analysis gates (``director.rollouts.gates``): each gate passes, fails
and is inconclusive with too few samples on either side; a step fails on any failed gate
and passes only when every gate passes."""

from __future__ import annotations

import random

import pytest

from director.rollouts.gates import DEFAULT_GATES, Gate, Verdict, judge_all
from state.outcomes import Outcomes


def answers(n: int, *, ttft: float = 0.2, itl: float = 0.02, errors: int = 0,
            finish: str = "stop", tokens: int = 100, length_share: float = 0.0) -> Outcomes:
    o = Outcomes()
    for i in range(n):
        if i < errors:
            o.record(ok=False)
            continue
        reason = "length" if i < errors + length_share * n else finish
        o.record(ok=True, ttft_s=ttft * (1 + (i % 10) / 50), itl_s=itl, finish=reason,
                 output_tokens=tokens)
    return o


@pytest.mark.parametrize(("gate", "bad"), [
    (Gate("ttft-p95", 1.25), {"ttft": 0.4}),
    (Gate("itl-p95", 1.25), {"itl": 0.05}),
    (Gate("error-rate", 0.02), {"errors": 30}),
    (Gate("finish-reasons", 0.15), {"length_share": 0.4}),
    (Gate("output-length", 0.25), {"tokens": 40}),
])
def test_each_gate_fails_a_bad_candidate_and_passes_a_good_one(gate: Gate, bad) -> None:
    baseline = answers(400)
    good = gate.judge(answers(300), baseline)
    assert good.verdict is Verdict.PASS, good
    failed = gate.judge(answers(300, **bad), baseline)
    assert failed.verdict is Verdict.FAIL, failed
    assert failed.detail and failed.samples[1] == gate.judge(answers(300), baseline).samples[1]


@pytest.mark.parametrize("gate", DEFAULT_GATES, ids=lambda g: g.name)
def test_too_few_samples_is_inconclusive_not_a_pass(gate: Gate) -> None:
    few = gate.min_samples - 1
    for candidate, baseline in ((answers(few, ttft=5.0, errors=few), answers(400)),
                                (answers(400), answers(few)), (Outcomes(), Outcomes())):
        result = gate.judge(candidate, baseline)
        assert result.verdict is Verdict.INCONCLUSIVE, result
        assert "needed on each side" in result.detail


def test_a_step_fails_on_any_gate_and_passes_only_on_all() -> None:
    baseline = answers(400)
    assert judge_all(DEFAULT_GATES, answers(400), baseline)[0] is Verdict.PASS
    verdict, results = judge_all(DEFAULT_GATES, answers(400, errors=40), baseline)
    assert verdict is Verdict.FAIL
    assert [r.gate for r in results if r.verdict is Verdict.FAIL] == ["error-rate"]
    assert judge_all(DEFAULT_GATES, answers(20), baseline)[0] is Verdict.INCONCLUSIVE


def test_gates_are_checked_when_made() -> None:
    for bad in (("p99", 1.0, 10), ("ttft-p95", -1.0, 10), ("ttft-p95", 1.2, 0)):
        with pytest.raises(ValueError):
            Gate(*bad)


def drawn(n: int, rng: random.Random, slow: float = 1.0) -> Outcomes:
    """``n`` answers as a loaded server gives them: lognormal times, varied lengths."""
    o = Outcomes()
    for _ in range(n):
        tokens = max(1, int(rng.lognormvariate(4.5, 0.8)))
        o.record(ok=rng.random() > 0.01, ttft_s=slow * rng.lognormvariate(-3.0, 0.5),
                 itl_s=slow * rng.lognormvariate(-4.0, 0.3),
                 finish="length" if rng.random() < 0.3 else "stop", output_tokens=tokens)
    return o


def test_chance_alone_does_not_fail_a_gate_and_a_real_regression_does() -> None:
    """A window of some 40 answers: two revisions alike must not fail (at point estimates
    the p95 TTFT gate failed 32 and the ITL gate 10 of these 300 windows), and one four
    times slower must fail on 20 answers."""
    rng = random.Random(7)
    gates = [Gate(g.name, g.threshold, 10) for g in DEFAULT_GATES]
    failures = 0
    for _ in range(300):
        candidate, baseline = drawn(40, rng), drawn(80, rng)
        failures += judge_all(gates, candidate, baseline)[0] is Verdict.FAIL
    assert failures == 0
    for _ in range(20):
        verdict, results = judge_all(gates, drawn(20, rng, slow=4.0), drawn(80, rng))
        assert verdict is Verdict.FAIL
        assert {r.gate for r in results if r.verdict is Verdict.FAIL} <= {"ttft-p95",
                                                                          "itl-p95"}
