# SPDX-License-Identifier: Apache-2.0
"""Learning backend speed online from what streams through the proxy.

``StreamMeter`` watches one SSE response chunk by chunk and counts token events
(``data:`` lines, minus ``[DONE]`` and the usage-only chunk). When the stream ends
normally it yields a decode-rate sample::

    tokens_per_s = tokens after the first / (time of last chunk - time of first chunk)

which excludes queueing and prefill (they precede the first token). ``Ewma`` folds
samples into the backend's learned rate: ``r <- r + alpha * (sample - r)``, the first
sample taken as is. Speeds are never configured; the prior until the first sample is the
fleet's mean learned rate (or ``BalancerConfig.default_tokens_per_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SAMPLE_TOKENS = 3
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


class StreamMeter:
    """Counts streamed token events and their timing for one response."""

    __slots__ = ("events", "first_at", "last_at", "tokens_after_first")

    def __init__(self) -> None:
        self.events = 0
        self.tokens_after_first = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

    def observe(self, chunk: bytes, now: float) -> None:
        tokens = chunk.count(b"data:") - chunk.count(b"[DONE]") - chunk.count(b'"choices":[]')
        if tokens <= 0:
            return
        self.events += tokens
        if self.first_at is None:
            self.first_at = now
        else:
            self.tokens_after_first += tokens
        self.last_at = now

    def rate(self) -> float | None:
        """Tokens per second between the first and the last token chunk, if measurable."""
        if self.first_at is None or self.last_at is None:
            return None
        span = self.last_at - self.first_at
        if self.tokens_after_first < MIN_SAMPLE_TOKENS or span < MIN_SAMPLE_SECONDS:
            return None
        return self.tokens_after_first / span
