# SPDX-License-Identifier: Apache-2.0
"""A backend's error rate over the last ``window_s`` seconds, in one-second buckets.

The outlier ejection's second trigger (``pool_health``): consecutive errors miss a backend
that fails one request in two, since every success in between resets the count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ErrorRate:
    window_s: int = 10
    _second: list[int] = field(default_factory=list)  # the second each bucket counts
    _errors: list[int] = field(default_factory=list)
    _total: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._second = [-1] * self.window_s
        self._errors = [0] * self.window_s
        self._total = [0] * self.window_s

    def add(self, now: float, error: bool) -> None:
        second = math.floor(now)
        i = second % self.window_s
        if self._second[i] != second:
            self._second[i], self._errors[i], self._total[i] = second, 0, 0
        self._total[i] += 1
        self._errors[i] += error

    def counts(self, now: float) -> tuple[int, int]:
        """(errors, requests) over the window ending at ``now``."""
        oldest = math.floor(now) - self.window_s
        errors = total = 0
        for second, e, t in zip(self._second, self._errors, self._total, strict=True):
            if second > oldest:
                errors += e
                total += t
        return errors, total

    def reset(self) -> None:
        self.__post_init__()
