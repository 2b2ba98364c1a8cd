# SPDX-License-Identifier: Apache-2.0
"""``max-score`` picker: the candidate with the highest total score.

Ties (within ``1e-12``) are broken at random with the injected ``random.Random``, so that
equal backends share load instead of the first one taking everything (hot-spotting).
Parameter: ``rng`` (default ``random.Random(0)``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from regions.balancer.scheduling.pickers.totals import TotalsPicker
from regions.balancer.types import BackendSnapshot

TIE_EPSILON = 1e-12


@dataclass
class MaxScorePicker(TotalsPicker):
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    name: str = "max-score"

    def pick(self, candidates: Sequence[BackendSnapshot], scores: Sequence[float]) -> int:
        floor = max(scores) - TIE_EPSILON
        ties = [i for i, s in enumerate(scores) if s >= floor]
        return ties[0] if len(ties) == 1 else self.rng.choice(ties)
