# SPDX-License-Identifier: Apache-2.0
"""Learning backend speed online from what streams through the proxy.

``StreamMeter`` watches one SSE response chunk by chunk and counts token events
(``data:`` lines, minus ``[DONE]`` and the usage-only chunk). When the stream ends
normally it yields a decode-rate sample::

    tokens_per_s = tokens after the first / (time of last chunk - time of first chunk)

which excludes queueing and prefill (they precede the first token), and one engine
iteration's time (``step_seconds``: the median gap between chunks, per token, leaving out
the gaps long enough to have held a prefill of other requests' prompts). ``Ewma`` folds
samples into the backend's learned rate: ``r <- r + alpha * (sample - r)``, the first
sample taken as is. Speeds are never configured; the prior until the first sample is the
fleet's mean learned rate (or ``BalancerConfig.default_tokens_per_s``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

MIN_SAMPLE_TOKENS = 3
GAP_SAMPLES = 256  # per-token gaps kept for the median (a stream's first ones)
MIN_SAMPLE_SECONDS = 1e-3


@dataclass
class Ewma:
    """Exponentially weighted moving average; ``value`` is None until the first sample."""

    alpha: float = 0.2
    value: float | None = None
    samples: int = 0

    def update(self, sample: float) -> float:
        self.samples += 1
        if self.value is None:
            self.value = sample
        else:
            self.value += self.alpha * (sample - self.value)
        return self.value


FINISH_REASON = b'"finish_reason":'
PREFILL_GAP = 1.5  # a gap this many times the stream's lower quartile held a prefill


def decode_step(gaps: list[float]) -> float | None:
    """One decode iteration's time from a stream's gaps between tokens: the median of the
    gaps that held no prefill of another request's prompt (those are over ``PREFILL_GAP``
    times the lower quartile of the stream's gaps; a batch that grows or shrinks moves its
    gaps less). None with fewer than ``MIN_SAMPLE_TOKENS`` gaps."""
    if len(gaps) < MIN_SAMPLE_TOKENS:
        return None
    ordered = sorted(gaps)
    bound = PREFILL_GAP * ordered[(len(ordered) - 1) // 4]
    return statistics.median(g for g in ordered if g <= bound)


class StreamMeter:
    """Counts streamed token events and their timing for one response."""

    __slots__ = ("events", "finish", "first_at", "gaps", "last_at", "tokens_after_first")

    def __init__(self) -> None:
        self.events = 0
        self.finish: str | None = None  # the last finish_reason the stream named
        self.tokens_after_first = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.gaps: list[float] = []  # seconds per token between chunks, GAP_SAMPLES at most

    def observe(self, chunk: bytes, now: float) -> None:
        tokens = chunk.count(b"data:") - chunk.count(b"[DONE]") - chunk.count(b'"choices":[]')
        if tokens <= 0:
            return
        at = chunk.rfind(FINISH_REASON)  # OpenAI streams send it null until the last chunk
        if at >= 0:
            start = at + len(FINISH_REASON)
            while chunk[start:start + 1] == b" ":
                start += 1
            if chunk[start:start + 1] == b'"':
                end = chunk.find(b'"', start + 1, start + 41)
                if end > start + 1:
                    self.finish = chunk[start + 1:end].decode("ascii", "replace")
        self.events += tokens
        if self.first_at is None:
            self.first_at = now
        else:
            self.tokens_after_first += tokens
            if len(self.gaps) < GAP_SAMPLES and self.last_at is not None:
                self.gaps.append((now - self.last_at) / tokens)
        self.last_at = now

    def body(self, chunk: bytes) -> None:
        """A chunk of an answer that is not an event stream (``UsageMeter`` reads it)."""

    def output_tokens(self) -> int:
        """The answer's output tokens as far as this meter can tell: its token events."""
        return self.events

    def step_seconds(self) -> float | None:
        """The time of one decode iteration (``decode_step``), if measurable."""
        step = decode_step(self.gaps)
        return step if step is not None and step >= MIN_SAMPLE_SECONDS / MIN_SAMPLE_TOKENS \
            else None

    def rate(self) -> float | None:
        """Tokens per second between the first and the last token chunk, if measurable."""
        if self.first_at is None or self.last_at is None:
            return None
        span = self.last_at - self.first_at
        if self.tokens_after_first < MIN_SAMPLE_TOKENS or span < MIN_SAMPLE_SECONDS:
            return None
        return self.tokens_after_first / span
