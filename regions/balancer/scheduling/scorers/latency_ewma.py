# SPDX-License-Identifier: Apache-2.0
"""``latency-ewma`` scorer: prefer the backend with the lowest time to first token.

For each candidate ``b`` with at least ``min_samples`` TTFT samples::

    score_b = min_c(ttft_ewma_s_c) / ttft_ewma_s_b              in (0, 1], 1 for the best

A backend with fewer samples (new, or back from a TTFT ejection) is neutral: it is scored as
if its EWMA were the median of the candidates that have one, so it is neither favoured over
the typical backend nor starved of the traffic that would teach us its TTFT. When no
candidate has samples every score is 1 (no information, no preference).

Reads ``BackendSnapshot.ttft_ewma_s`` and ``ttft_samples`` (measured by the proxy from
sending a request to the first byte of a 200 answer; see ``latency``), over the requests
bound while the backend ran at most ``OutlierConfig.ttft_max_occupancy`` of its cap: it
says how soon a backend starts a request when it is not loaded, and leaves queueing to the
in-band scorers (``outstanding-work``), which it complements rather than replaces.
Parameter: ``min_samples`` (default 3).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

MIN_TTFT_S = 1e-6
PARAMS = (Param("min_samples", 3, low=1, integer=True),)


@dataclass(frozen=True)
class LatencyEwmaScorer:
    name: str = "latency-ewma"
    min_samples: int = 3

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        known = [
            max(b.ttft_ewma_s, MIN_TTFT_S)
            if b.ttft_ewma_s is not None and b.ttft_samples >= self.min_samples
            else None
            for b in candidates
        ]
        measured = [v for v in known if v is not None]
        if not measured:
            return [1.0] * len(candidates)
        neutral = statistics.median(measured)
        best = min(measured)
        return [best / (neutral if v is None else v) for v in known]
