"""What the answers of one revision of a model were like, as counts that subtract and add.

A balancer counts, per model and declared revision, every answer it relayed: requests,
errors (5xx, a stream cut upstream), output tokens, finish reasons, and histograms of the
time to first token and of the inter-token latency on fixed bounds. It publishes the
cumulative counts; a rollout's analysis takes the difference between two readings (its
window) and adds the regions together, as Prometheus does with counters. Each balancer run
counts under its own ``epoch`` (``outcome_field``), so the balancers of a region and a
restarted balancer never overwrite each other; a field absent at a window's start counts
whole, and a reading whose counts went down is a reset and counts whole too.

Bounds grow by 10 % from 1 ms to about two minutes, so a quantile read from them is
within 10 % of the true one.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state.errors import RecordError

BOUND_RATIO = 1.1
BOUNDS: tuple[float, ...] = tuple(0.001 * BOUND_RATIO ** i for i in range(124))  # to 134 s


def bucket_of(seconds: float) -> int:
    """The index of the first bound at or above ``seconds`` (the last bucket: above all)."""
    return bisect.bisect_left(BOUNDS, seconds)


@dataclass
class Outcomes:
    """Cumulative counts of one (model, revision) at one balancer."""

    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    answered: int = 0  # requests with a whole answer (their output_tokens are counted)
    finish: dict[str, int] = field(default_factory=dict)
    ttft: dict[int, int] = field(default_factory=dict)  # bucket -> count
    itl: dict[int, int] = field(default_factory=dict)
    output_tokens_sq: int = 0  # sum of each answer's output tokens squared (its variance)

    def record(self, *, ok: bool, ttft_s: float | None = None, itl_s: float | None = None,
               finish: str | None = None, output_tokens: int | None = None) -> None:
        """Count one request: ``ok`` False for an error (5xx, cut upstream); the rest as
        far as the answer told them."""
        self.requests += 1
        if not ok:
            self.errors += 1
        if ttft_s is not None:
            index = bucket_of(ttft_s)
            self.ttft[index] = self.ttft.get(index, 0) + 1
        if itl_s is not None:
            index = bucket_of(itl_s)
            self.itl[index] = self.itl.get(index, 0) + 1
        if finish is not None:
            self.finish[finish] = self.finish.get(finish, 0) + 1
        if output_tokens is not None and ok:
            self.answered += 1
            self.output_tokens += output_tokens
            self.output_tokens_sq += output_tokens * output_tokens

    # -- windows and sums ------------------------------------------------------------------

    def minus(self, earlier: Outcomes) -> Outcomes:
        """The counts since ``earlier``; all of these when any went down (a reset)."""
        pairs = ((self.requests, earlier.requests), (self.errors, earlier.errors),
                 (self.output_tokens, earlier.output_tokens), (self.answered, earlier.answered),
                 (self.output_tokens_sq, earlier.output_tokens_sq))
        maps: tuple[tuple[Mapping[Any, int], Mapping[Any, int]], ...] = (
            (self.finish, earlier.finish), (self.ttft, earlier.ttft), (self.itl, earlier.itl))
        if any(now < then for now, then in pairs) or any(
                mine.get(k, 0) < count for mine, theirs in maps for k, count in theirs.items()):
            return self.copy()
        return Outcomes(self.requests - earlier.requests, self.errors - earlier.errors,
                        self.output_tokens - earlier.output_tokens,
                        self.answered - earlier.answered,
                        _sub(self.finish, earlier.finish), _sub(self.ttft, earlier.ttft),
                        _sub(self.itl, earlier.itl),
                        self.output_tokens_sq - earlier.output_tokens_sq)

    def plus(self, other: Outcomes) -> Outcomes:
        return Outcomes(self.requests + other.requests, self.errors + other.errors,
                        self.output_tokens + other.output_tokens, self.answered + other.answered,
                        _add(self.finish, other.finish), _add(self.ttft, other.ttft),
                        _add(self.itl, other.itl), self.output_tokens_sq + other.output_tokens_sq)

    def copy(self) -> Outcomes:
        return Outcomes(self.requests, self.errors, self.output_tokens, self.answered,
                        dict(self.finish), dict(self.ttft), dict(self.itl),
                        self.output_tokens_sq)

    # -- what an analysis reads ------------------------------------------------------------

    def quantile(self, which: str, q: float) -> float | None:
        """The ``q`` quantile of ``"ttft"`` or ``"itl"`` (seconds), read from the bounds
        (interpolated within the bucket); None without samples."""
        counts = self.ttft if which == "ttft" else self.itl
        total = sum(counts.values())
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for index in sorted(counts):
            count = counts[index]
            if seen + count >= rank:
                if index >= len(BOUNDS):  # above every bound
                    return BOUNDS[-1]
                upper, lower = BOUNDS[index], BOUNDS[index - 1] if index else 0.0
                return lower + (upper - lower) * max(0.0, rank - seen) / count
            seen += count
        return BOUNDS[-1]

    def quantile_bounds(self, which: str, q: float, z: float) -> tuple[float, float] | None:
        """Bounds of the ``q`` quantile of ``"ttft"`` or ``"itl"`` that hold it with the
        confidence ``z`` (standard deviations) says, whatever the distribution: the values
        of the ranks ``n q -+ z sqrt(n q (1 - q))`` (order statistics), each read as its
        bucket's far bound (the low one's lower, the high one's upper). None without
        samples."""
        counts = self.ttft if which == "ttft" else self.itl
        n = sum(counts.values())
        if n == 0:
            return None
        spread = z * math.sqrt(n * q * (1 - q))
        ordered = sorted(counts.items())
        return (_at_rank(ordered, max(1, math.floor(n * q - spread)), upper=False),
                _at_rank(ordered, min(n, math.ceil(n * q + spread) + 1), upper=True))

    def samples(self, which: str) -> int:
        return sum((self.ttft if which == "ttft" else self.itl).values())

    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    def mean_output_tokens(self) -> float | None:
        return self.output_tokens / self.answered if self.answered else None

    def output_tokens_variance(self) -> float | None:
        """The variance of the answers' output tokens (None: fewer than two answers)."""
        if self.answered < 2:
            return None
        mean = self.output_tokens / self.answered
        return max(0.0, (self.output_tokens_sq - self.answered * mean * mean)
                   / (self.answered - 1))

    def finish_shares(self) -> dict[str, float]:
        total = sum(self.finish.values())
        return {k: v / total for k, v in self.finish.items()} if total else {}

    # -- as stored ---------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps({"requests": self.requests, "errors": self.errors,
                           "output_tokens": self.output_tokens, "answered": self.answered,
                           "output_tokens_sq": self.output_tokens_sq,
                           "finish": self.finish,
                           "ttft": {str(k): v for k, v in sorted(self.ttft.items())},
                           "itl": {str(k): v for k, v in sorted(self.itl.items())}},
                          separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Outcomes:
        try:
            data = json.loads(text)
            return cls(_count(data, "requests"), _count(data, "errors"),
                       _count(data, "output_tokens"), _count(data, "answered"),
                       _counts(data.get("finish", {}), str),
                       _counts(data.get("ttft", {}), int), _counts(data.get("itl", {}), int),
                       _count(data, "output_tokens_sq"))
        except (ValueError, TypeError, AttributeError) as exc:
            raise RecordError(f"outcomes: {exc}") from exc


def _at_rank(ordered: list[tuple[int, int]], rank: int, upper: bool) -> float:
    """The bucket bound of the ``rank``-th smallest sample (its bucket's upper bound, or
    its lower one)."""
    seen = 0
    for index, count in ordered:
        seen += count
        if seen >= rank:
            if upper:
                return BOUNDS[min(index, len(BOUNDS) - 1)]
            return BOUNDS[index - 1] if index > 0 else 0.0
    return BOUNDS[-1]


def _count(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: not a count: {value!r}")
    return value


def _counts(raw: Any, key: type) -> dict[Any, int]:
    if not isinstance(raw, dict):
        raise ValueError("expected an object")
    out = {}
    for k, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{k}: not a count: {v!r}")
        out[key(k)] = v
    return out


def _sub(a: Mapping[Any, int], b: Mapping[Any, int]) -> dict[Any, int]:
    return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0) > 0}


def _add(a: Mapping[Any, int], b: Mapping[Any, int]) -> dict[Any, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def outcome_field(model: str, revision: str, epoch: str) -> str:
    """The hash field of one balancer run's counts of a model's revision in
    ``Keys.outcomes(region)``: every balancer of a region, and every run of one, counts
    apart (a run that ended keeps its last counts, which add nothing to later windows)."""
    return f"{model}|{revision}|{epoch}"


def parse_outcome_field(name: str) -> tuple[str, str, str] | None:
    """(model, revision, epoch) of a field ``outcome_field`` made; None for another."""
    parts = name.rsplit("|", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None
