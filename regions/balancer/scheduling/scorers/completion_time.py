# SPDX-License-Identifier: Apache-2.0
"""``completion-time`` scorer: prefer the backend that would finish *this* request soonest,
for GPU servers that run a batch of sequences at once.

A batched server starts a request as soon as one of its ``cap`` slots is free, and then
decodes it at its per-sequence rate whatever else runs beside it; the work of the others
delays it only while every slot is taken. For each candidate ``b``::

    per_slot_s_b = (work_tokens_b / in_flight_b) / tokens_per_s_b   mean in-flight job time
    wait_b       = 0                                                  if in_flight_b < cap_b
                 = (in_flight_b - cap_b + 1) * per_slot_s_b / cap_b   else (prefetched)
    finish_b     = wait_b + cost_tokens / tokens_per_s_b
    score_b      = min_c(finish_c) / finish_b                         in (0, 1], 1 for the best

``tokens_per_s_b`` is the per-sequence decode rate learned online from streamed chunks
(which already reflects how busy that GPU usually is); ``cost_tokens`` the request's
predicted work (prompt / prefill ratio + predicted output). A fast GPU wins while it has a
free slot; once full, a slower GPU with a free slot wins unless the request is long enough
that decoding it fast beats waiting for a slot. No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.scheduling.finish_time import finish_s
from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class CompletionTimeScorer:
    name: str = "completion-time"

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        cost = max(request.cost_tokens, 1e-9)
        finish = [finish_s(b, cost) for b in candidates]
        best = min(finish)
        return [best / f for f in finish]
