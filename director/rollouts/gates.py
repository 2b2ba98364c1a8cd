"""Analysis gates of a rollout step: the candidate revision against the baseline over the
same window (``state.outcomes.Outcomes``, summed over the regions of the rollout).

Each gate compares one signal, has a threshold and a minimum sample count on both sides;
with fewer samples it is inconclusive, which is not a pass: a step advances only when every
gate passes, and rolls back as soon as one fails.

A gate fails only when the candidate is worse than the threshold allows beyond doubt: by
``Z`` (3) standard errors, or for a quantile when even the low end of the candidate's
confidence interval is above the threshold times the high end of the baseline's (order
statistics, no assumption about the distribution). A step is judged every tick over its
growing window, so a gate that fails on chance alone, at its point estimates, would roll
back good revisions: in drills at some 40 answers a window, p95 times of 61 ms against
45 ms (1.36x) and 18 ms against 14 ms rolled back two of two good candidates. A real
regression grows more certain as samples come; a bad revision four times slower, or with
a fifth of its answers errors, still fails within its first window.

==================  =======================================================  ============
gate                fails when, beyond doubt                                 samples
==================  =======================================================  ============
``ttft-p95``        candidate p95 time to first token > threshold x baseline  TTFTs
``itl-p95``         candidate p95 inter-token latency > threshold x baseline  streams
``error-rate``      candidate error rate > baseline's + threshold (absolute)  requests
``finish-reasons``  a finish reason's share differs by more than threshold    finishes
                    (the largest such difference is the total variation
                    distance of two-reason mixes: 0 same, 1 disjoint)
``output-length``   mean output tokens differ by more than threshold          answers
                    (relative: |candidate / baseline - 1|)
==================  =======================================================  ============
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from state.outcomes import Outcomes

Z = 3.0  # standard errors beyond the threshold before a gate fails (one-sided, 0.13 %)


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class GateResult:
    gate: str
    verdict: Verdict
    candidate: float | None
    baseline: float | None
    threshold: float
    samples: tuple[int, int]  # (candidate, baseline)
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"gate": self.gate, "verdict": self.verdict.value, "candidate": self.candidate,
                "baseline": self.baseline, "threshold": self.threshold,
                "samples": list(self.samples), "detail": self.detail}


@dataclass(frozen=True)
class Gate:
    """One gate: ``name`` (see the module's table), its threshold and minimum samples."""

    name: str
    threshold: float
    min_samples: int = 50

    def __post_init__(self) -> None:
        if self.name not in GATES:
            raise ValueError(f"unknown gate {self.name!r} (gates: {', '.join(GATES)})")
        if not self.threshold >= 0:
            raise ValueError(f"gate {self.name}: threshold must be >= 0")
        if self.min_samples < 1:
            raise ValueError(f"gate {self.name}: min_samples must be >= 1")

    def judge(self, candidate: Outcomes, baseline: Outcomes) -> GateResult:
        return GATES[self.name](self, candidate, baseline)


def _result(gate: Gate, failed: bool | None, c: float | None, b: float | None,
            samples: tuple[int, int], detail: str) -> GateResult:
    if min(samples) < gate.min_samples or failed is None:
        verdict = Verdict.INCONCLUSIVE
        detail = (f"{samples[0]} candidate and {samples[1]} baseline samples, "
                  f"{gate.min_samples} needed on each side")
    else:
        verdict = Verdict.FAIL if failed else Verdict.PASS
    return GateResult(gate.name, verdict, c, b, gate.threshold, samples, detail)


def _quantile_gate(which: str, label: str) -> Callable[[Gate, Outcomes, Outcomes], GateResult]:
    def judge(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
        samples = (candidate.samples(which), baseline.samples(which))
        c, b = candidate.quantile(which, 0.95), baseline.quantile(which, 0.95)
        c_range = candidate.quantile_bounds(which, 0.95, Z)
        b_range = baseline.quantile_bounds(which, 0.95, Z)
        if c is None or b is None or c_range is None or b_range is None:
            return _result(gate, None, c, b, samples, "")
        failed = c_range[0] > gate.threshold * b_range[1]
        return _result(gate, failed, c, b, samples,
                       f"p95 {label} {c * 1000:.0f} ms ({_ms(c_range)}) against "
                       f"{b * 1000:.0f} ms ({_ms(b_range)}) (at most {gate.threshold:g}x "
                       "beyond doubt)")
    return judge


def _ms(bounds: tuple[float, float]) -> str:
    return f"{bounds[0] * 1000:.0f}-{bounds[1] * 1000:.0f}"


def _beyond(excess: float, standard_error: float) -> bool:
    """Whether ``excess`` (how far past the threshold) is beyond doubt."""
    return excess > Z * standard_error


def _error_rate(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (candidate.requests, baseline.requests)
    c, b = candidate.error_rate(), baseline.error_rate()
    if c is None or b is None:
        return _result(gate, None, c, b, samples, "")
    error = math.sqrt(c * (1 - c) / samples[0] + b * (1 - b) / samples[1])
    return _result(gate, _beyond(c - b - gate.threshold, error), c, b, samples,
                   f"error rate {c:.2%} against {b:.2%} (at most {gate.threshold:.2%} more "
                   "beyond doubt)")


def _finish_reasons(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (sum(candidate.finish.values()), sum(baseline.finish.values()))
    cs, bs = candidate.finish_shares(), baseline.finish_shares()
    if not cs or not bs:
        return _result(gate, None, None, None, samples, "")
    distance = 0.5 * sum(abs(cs.get(k, 0.0) - bs.get(k, 0.0)) for k in {*cs, *bs})
    failed = False
    for k in {*cs, *bs}:
        c, b = cs.get(k, 0.0), bs.get(k, 0.0)
        error = math.sqrt(c * (1 - c) / samples[0] + b * (1 - b) / samples[1])
        failed = failed or _beyond(abs(c - b) - gate.threshold, error)
    mix = ", ".join(f"{k} {cs.get(k, 0.0):.0%}/{bs.get(k, 0.0):.0%}" for k in sorted({*cs, *bs}))
    return _result(gate, failed, distance, 0.0, samples,
                   f"finish reasons (candidate/baseline) {mix}: distance {distance:.2f} "
                   f"(a reason's share at most {gate.threshold:g} apart beyond doubt)")


def _output_length(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (candidate.answered, baseline.answered)
    c, b = candidate.mean_output_tokens(), baseline.mean_output_tokens()
    if c is None or b is None or b == 0:
        return _result(gate, None, c, b, samples, "")
    drift = abs(c / b - 1)
    error = math.sqrt((candidate.output_tokens_variance() or 0.0) / samples[0]
                      + (baseline.output_tokens_variance() or 0.0) / samples[1])
    failed = _beyond(abs(c - b) - gate.threshold * b, error)
    return _result(gate, failed, c, b, samples,
                   f"mean output {c:.1f} tokens against {b:.1f} ({drift:.0%} apart, at most "
                   f"{gate.threshold:.0%} beyond doubt)")


GATES: dict[str, Callable[[Gate, Outcomes, Outcomes], GateResult]] = {
    "ttft-p95": _quantile_gate("ttft", "time to first token"),
    "itl-p95": _quantile_gate("itl", "inter-token latency"),
    "error-rate": _error_rate,
    "finish-reasons": _finish_reasons,
    "output-length": _output_length,
}

DEFAULT_GATES: tuple[Gate, ...] = (
    Gate("ttft-p95", 1.25), Gate("itl-p95", 1.25), Gate("error-rate", 0.02, 100),
    Gate("finish-reasons", 0.15), Gate("output-length", 0.25),
)


def judge_all(gates: Sequence[Gate], candidate: Outcomes,
              baseline: Outcomes) -> tuple[Verdict, list[GateResult]]:
    """Every gate's result and the step's verdict: fail if any fails, pass if all pass,
    else inconclusive."""
    results = [gate.judge(candidate, baseline) for gate in gates]
    verdicts = {r.verdict for r in results}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL, results
    if verdicts == {Verdict.PASS}:
        return Verdict.PASS, results
    return Verdict.INCONCLUSIVE, results
