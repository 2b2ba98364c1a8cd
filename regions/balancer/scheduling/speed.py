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


@dataclass
class BatchRate:
    """A backend's decode speed as a function of how many streams it runs at once.

    A continuous-batching server decodes every running sequence in each step, and a step
    takes longer the more sequences it holds, so one stream's time per token grows with the
    batch. Fitted online by weighted least squares, each sample weighing ``forget`` times
    the one before (so a backend that slows down or speeds up is followed)::

        seconds_per_token(b) = base + slope * b      (slope >= 0)

    from (mean concurrency over a stream's decode, 1 / its tokens per second). Until the
    samples span at least ``min_spread`` streams of concurrency the slope is 0 and ``base``
    their mean; ``None`` before ``min_samples`` samples."""

    forget: float = 0.98
    min_samples: int = 3
    min_spread: float = 2.0
    _w: float = 0.0
    _sx: float = 0.0
    _sxx: float = 0.0
    _sy: float = 0.0
    _sxy: float = 0.0
    samples: int = 0

    def observe(self, concurrency: float, tokens_per_s: float) -> None:
        if tokens_per_s <= 0 or concurrency <= 0:
            return
        y = 1.0 / tokens_per_s
        k = self.forget
        self._w = k * self._w + 1.0
        self._sx = k * self._sx + concurrency
        self._sxx = k * self._sxx + concurrency * concurrency
        self._sy = k * self._sy + y
        self._sxy = k * self._sxy + concurrency * y
        self.samples += 1

    def model(self) -> tuple[float, float] | None:
        """``(base, slope)``, or None before enough samples."""
        if self.samples < self.min_samples or self._w <= 0:
            return None
        w = self._w
        mean_x, mean_y = self._sx / w, self._sy / w
        var_x = self._sxx / w - mean_x * mean_x
        if var_x < (self.min_spread / 2) ** 2:
            return mean_y, 0.0
        slope = max(0.0, (self._sxy / w - mean_x * mean_y) / var_x)
        base = max(mean_y - slope * mean_x, 0.1 * mean_y)
        return base, slope


FINISH_REASON = b'"finish_reason":'


class StreamMeter:
    """Counts streamed token events and their timing for one response."""

    __slots__ = ("events", "finish", "first_at", "last_at", "tokens_after_first")

    def __init__(self) -> None:
        self.events = 0
        self.finish: str | None = None  # the last finish_reason the stream named
        self.tokens_after_first = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

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
        self.last_at = now

    def body(self, chunk: bytes) -> None:
        """A chunk of an answer that is not an event stream (``UsageMeter`` reads it)."""

    def output_tokens(self) -> int:
        """The answer's output tokens as far as this meter can tell: its token events."""
        return self.events

    def rate(self) -> float | None:
        """Tokens per second between the first and the last token chunk, if measurable."""
        if self.first_at is None or self.last_at is None:
            return None
        span = self.last_at - self.first_at
        if self.tokens_after_first < MIN_SAMPLE_TOKENS or span < MIN_SAMPLE_SECONDS:
            return None
        return self.tokens_after_first / span
