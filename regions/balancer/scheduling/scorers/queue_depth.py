# SPDX-License-Identifier: Apache-2.0
"""``queue-depth`` scorer: prefer backends with fewer requests in flight, relative to cap.

For each candidate ``b``: ``score_b = 1 - in_flight_b / max(cap_b, 1)``, clamped to
[0, 1]. Reads the balancer's own in-band count (exact, no scrape delay). No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class QueueDepthScorer:
    name: str = "queue-depth"

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        # one pass; ``for u in [x]`` is compiled as a plain assignment
        return [
            0.0 if u >= 1.0 else 1.0 if u <= 0.0 else 1.0 - u
            for b in candidates
            for u in [b.in_flight / (b.cap if b.cap > 1 else 1)]
        ]
