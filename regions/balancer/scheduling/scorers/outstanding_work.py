# SPDX-License-Identifier: Apache-2.0
"""``outstanding-work`` scorer: prefer the backend that would finish this request soonest.

For each candidate ``b``::

    finish_b = (work_tokens_b + cost_tokens) / tokens_per_s_b
    score_b  = min_c(finish_c) / finish_b                    in (0, 1], 1 for the best

``work_tokens_b`` is the sum over ``b``'s in-flight requests of
``prompt_tokens / prefill_ratio + output_tokens`` (decode-token equivalents);
``tokens_per_s_b`` is ``b``'s decode rate learned online from streamed chunks (an EWMA),
never configured. Adding the request's own cost makes the choice size-aware: an idle fast
GPU beats an idle slow one, and a long prompt weighs more than a short one. No parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo


@dataclass(frozen=True)
class OutstandingWorkScorer:
    name: str = "outstanding-work"

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        cost = max(request.cost_tokens, 1e-9)
        finish = [(b.work_tokens + cost) / b.tokens_per_s for b in candidates]
        best = min(finish)
        return [best / f for f in finish]
