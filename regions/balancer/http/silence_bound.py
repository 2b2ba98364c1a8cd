# SPDX-License-Identifier: Apache-2.0
"""How long a backend's stream may go silent mid-answer before it is declared stalled.

Learned per backend from its own whole streams: each gives its longest gap between two
pieces after the first (decode steps, plus whatever paused them: another request's
prefill, a preemption). The bound is::

    max(factor x p99 of those longest gaps over the last ``window`` streams, floor)

The longest gap of a stream is already a tail; its p99 across streams is the silence a
healthy stream of this backend reaches about once in a hundred, and ``factor`` (default 3)
keeps a false stall (a resume that was not needed: a second prefill) rare. ``floor``
(default 2 s) keeps a backend whose decode is very even from being cut on a single hiccup.
Until ``min_streams`` streams have ended, the bound is ``prior_s`` (default 4 x floor).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SilenceSettings:
    factor: float = 3.0
    floor_s: float = 2.0
    window: int = 200
    min_streams: int = 20
    prior_s: float | None = None  # None: 4 x floor_s

    def __post_init__(self) -> None:
        if self.factor < 1 or self.floor_s <= 0 or self.window < 1 or self.min_streams < 1:
            raise ValueError("silence bound: factor >= 1, floor > 0, window and "
                             "min_streams >= 1")


@dataclass
class SilenceBound:
    """One backend's bound, from the longest gaps of its recent streams."""

    settings: SilenceSettings
    gaps: deque[float] = field(default_factory=deque)
    _bound: float | None = None
    _stale: int = 0

    def observe(self, longest_gap_s: float) -> None:
        """A whole stream's longest silence between two pieces."""
        self.gaps.append(longest_gap_s)
        if len(self.gaps) > self.settings.window:
            self.gaps.popleft()
        self._stale += 1

    def seconds(self) -> float:
        """The bound now (recomputed every tenth stream: a sort of ``window`` values)."""
        s = self.settings
        if len(self.gaps) < s.min_streams:
            return s.prior_s if s.prior_s is not None else 4 * s.floor_s
        if self._bound is None or self._stale >= 10:
            ordered = sorted(self.gaps)
            p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
            self._bound, self._stale = max(s.factor * p99, s.floor_s), 0
        return self._bound


class SilenceBounds:
    """Every backend's bound, by name (created on first use)."""

    def __init__(self, settings: SilenceSettings | None = None) -> None:
        self.settings = settings or SilenceSettings()
        self._by_backend: dict[str, SilenceBound] = {}

    def of(self, backend: str) -> SilenceBound:
        bound = self._by_backend.get(backend)
        if bound is None:
            bound = self._by_backend[backend] = SilenceBound(self.settings)
        return bound
