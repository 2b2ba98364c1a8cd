"""Analysis gates of a rollout step: the candidate revision against the baseline over the
same window (``state.outcomes.Outcomes``, summed over the regions of the rollout).

Each gate compares one signal, has a threshold and a minimum sample count on both sides;
with fewer samples it is inconclusive, which is not a pass: a step advances only when every
gate passes, and rolls back as soon as one fails.

==================  =======================================================  ============
gate                fails when                                               samples
==================  =======================================================  ============
``ttft-p95``        candidate p95 time to first token > threshold x baseline  TTFTs
``itl-p95``         candidate p95 inter-token latency > threshold x baseline  streams
``error-rate``      candidate error rate > baseline's + threshold (absolute)  requests
``finish-reasons``  total variation distance of the finish-reason mixes       finishes
                    > threshold (0: same mix, 1: disjoint)
``output-length``   mean output tokens differ by more than threshold          answers
                    (relative: |candidate / baseline - 1|)
==================  =======================================================  ============
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from state.outcomes import Outcomes


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
        if c is None or b is None:
            return _result(gate, None, c, b, samples, "")
        return _result(gate, c > gate.threshold * b, c, b, samples,
                       f"p95 {label} {c * 1000:.0f} ms against {b * 1000:.0f} ms "
                       f"(at most {gate.threshold:g}x)")
    return judge


def _error_rate(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (candidate.requests, baseline.requests)
    c, b = candidate.error_rate(), baseline.error_rate()
    if c is None or b is None:
        return _result(gate, None, c, b, samples, "")
    return _result(gate, c > b + gate.threshold, c, b, samples,
                   f"error rate {c:.2%} against {b:.2%} (at most {gate.threshold:.2%} more)")


def _finish_reasons(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (sum(candidate.finish.values()), sum(baseline.finish.values()))
    cs, bs = candidate.finish_shares(), baseline.finish_shares()
    if not cs or not bs:
        return _result(gate, None, None, None, samples, "")
    distance = 0.5 * sum(abs(cs.get(k, 0.0) - bs.get(k, 0.0)) for k in {*cs, *bs})
    mix = ", ".join(f"{k} {cs.get(k, 0.0):.0%}/{bs.get(k, 0.0):.0%}" for k in sorted({*cs, *bs}))
    return _result(gate, distance > gate.threshold, distance, 0.0, samples,
                   f"finish reasons (candidate/baseline) {mix}: distance {distance:.2f} "
                   f"(at most {gate.threshold:g})")


def _output_length(gate: Gate, candidate: Outcomes, baseline: Outcomes) -> GateResult:
    samples = (candidate.answered, baseline.answered)
    c, b = candidate.mean_output_tokens(), baseline.mean_output_tokens()
    if c is None or b is None or b == 0:
        return _result(gate, None, c, b, samples, "")
    drift = abs(c / b - 1)
    return _result(gate, drift > gate.threshold, c, b, samples,
                   f"mean output {c:.1f} tokens against {b:.1f} ({drift:.0%} apart, at most "
                   f"{gate.threshold:.0%})")


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
