# SPDX-License-Identifier: Apache-2.0
"""First-byte hedging: when a stream's first token is late, ask a second server too.

A streamed request whose first body byte has not come ``bound`` seconds after it was sent
gets a copy on another server of the same model and revision; the first of the two to
send a body byte wins and the other is closed at once (which aborts its sequence on the
engine). Three things keep the extra work small:

- **The bound** is learned: the ``quantile`` (default p90) of recent first-byte times in
  the region for prompts of the same size class (powers of two of prompt tokens; the
  region-wide figure until a class has ``min_samples``), never under ``floor_s``. A
  request slower than nine in ten of its peers is late, whatever its cause: a slow or
  stuck server, a long queue there, a preemption.
- **The budget**, a token bucket: each eligible request adds ``share`` (default 0.05) of
  a hedge, up to ``burst``; a hedge spends one. Hedges are so at most ``share`` of
  requests (plus the burst) over any stretch.
- **Saturation**: no hedge while the region queues requests or has no free slot, since a
  copy would then take a slot a waiting request needs. A hedge never waits in the queue:
  it binds at once or not at all.

Only requests of priority ``min_priority`` or more are hedged (default 0: all but those
an operator marked below normal, such as batch work). Off by default (``share`` 0): it
is turned on where the hedging benchmark shows it pays.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SIZE_CLASSES = 20


@dataclass(frozen=True)
class HedgeSettings:
    share: float = 0.0  # hedges per eligible request, at most (0: off)
    burst: float = 10.0
    quantile: float = 0.9
    floor_s: float = 0.05
    window: int = 500
    min_samples: int = 50
    min_priority: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0 or self.burst < 1 or not 0.5 <= self.quantile < 1 \
                or self.floor_s <= 0 or self.window < self.min_samples or self.min_samples < 1:
            raise ValueError("hedging: share in [0, 1], burst >= 1, quantile in [0.5, 1), "
                             "floor > 0, window >= min_samples >= 1")

    @property
    def on(self) -> bool:
        return self.share > 0


@dataclass
class _Window:
    samples: deque[float] = field(default_factory=deque)
    cached: float | None = None
    stale: int = 0


class FirstByteBound:
    """When a first byte is late, by prompt size class, from recent first-byte times."""

    def __init__(self, settings: HedgeSettings) -> None:
        self.settings = settings
        self._classes = [_Window() for _ in range(SIZE_CLASSES)]
        self._all = _Window()

    def observe(self, prompt_tokens: int, seconds: float) -> None:
        for window in (self._classes[_size_class(prompt_tokens)], self._all):
            window.samples.append(seconds)
            if len(window.samples) > self.settings.window:
                window.samples.popleft()
            window.stale += 1

    def seconds(self, prompt_tokens: int) -> float | None:
        """The bound for a prompt of this size; None until the region has samples."""
        for window in (self._classes[_size_class(prompt_tokens)], self._all):
            if len(window.samples) >= self.settings.min_samples:
                return max(self._quantile(window), self.settings.floor_s)
        return None

    def _quantile(self, window: _Window) -> float:
        if window.cached is None or window.stale >= 20:
            ordered = sorted(window.samples)
            at = min(len(ordered) - 1, int(self.settings.quantile * len(ordered)))
            window.cached, window.stale = ordered[at], 0
        return window.cached


class HedgeBudget:
    """A token bucket: ``share`` of a hedge per eligible request, at most ``burst``."""

    def __init__(self, share: float, burst: float) -> None:
        self.share = share
        self.burst = burst
        self.tokens = burst

    def earn(self) -> None:
        self.tokens = min(self.burst, self.tokens + self.share)

    def spend(self) -> bool:
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


def _size_class(prompt_tokens: int) -> int:
    return min(SIZE_CLASSES - 1, max(0, prompt_tokens).bit_length())
