# SPDX-License-Identifier: Apache-2.0
"""``round-robin`` picker: candidates in turn, by backend index, ignoring the scores.

A cursor walks the region's backends in index order; the pick is the first candidate at or
after the cursor (wrapping around), and the cursor moves past it. Backends dropped by a
filter are skipped without losing the rotation of the others. The baseline the benchmark
compares against (what nginx does by default). Parameter: ``rng`` (unused; accepted so
every picker is built the same way).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.scheduling.pickers.totals import TotalsPicker
from regions.balancer.types import BackendSnapshot

_WRAP = 1 << 30  # larger than any backend index


@dataclass
class RoundRobinPicker(TotalsPicker):
    rng: random.Random | None = None
    name: str = "round-robin"
    cursor: int = 0

    def pick(self, candidates: Sequence[BackendSnapshot], scores: Sequence[float]) -> int:
        cursor = self.cursor
        best = min(range(len(candidates)), key=lambda i: (candidates[i].index - cursor) % _WRAP)
        self.cursor = candidates[best].index + 1
        return best
