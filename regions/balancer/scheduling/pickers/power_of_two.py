# SPDX-License-Identifier: Apache-2.0
"""``power-of-two`` picker: sample two distinct candidates at random, keep the better one.

Cheap, and robust to stale scores (herding onto one backend is avoided by the sampling).
A tie between the two keeps the first sampled. Parameter: ``rng`` (default
``random.Random(0)``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.scheduling.pickers.totals import TotalsPicker
from regions.balancer.types import BackendSnapshot


@dataclass
class PowerOfTwoPicker(TotalsPicker):
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    name: str = "power-of-two"

    def pick(self, candidates: Sequence[BackendSnapshot], scores: Sequence[float]) -> int:
        if len(candidates) == 1:
            return 0
        a, b = self.rng.sample(range(len(candidates)), 2)
        return a if scores[a] >= scores[b] else b
