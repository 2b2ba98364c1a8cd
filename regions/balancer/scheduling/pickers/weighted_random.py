# SPDX-License-Identifier: Apache-2.0
"""``weighted-random`` picker: a candidate drawn with probability proportional to its
total score.

``P(i) = max(s_i, 0) / sum_j max(s_j, 0)``; when no total is positive, uniform. Spreads
load over good backends instead of sending every request to the single best one (useful
when many requests arrive between two snapshot changes). Parameter: ``rng`` (default
``random.Random(0)``; the profile injects its own).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.scheduling.pickers.totals import TotalsPicker
from regions.balancer.types import BackendSnapshot


@dataclass
class WeightedRandomPicker(TotalsPicker):
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    name: str = "weighted-random"

    def pick(self, candidates: Sequence[BackendSnapshot], scores: Sequence[float]) -> int:
        weights = [s if s > 0.0 else 0.0 for s in scores]
        total = sum(weights)
        if total <= 0.0:
            return self.rng.randrange(len(candidates))
        x = self.rng.random() * total
        last = 0
        for i, w in enumerate(weights):
            if w > 0.0:
                last = i
                x -= w
                if x < 0.0:
                    return i
        return last  # rounding left x at 0: the last positive weight
