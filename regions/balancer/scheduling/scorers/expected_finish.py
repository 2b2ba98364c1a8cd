# SPDX-License-Identifier: Apache-2.0
"""``expected-finish`` scorer: prefer the backend where this request would end soonest, with
each backend's speed learned as a function of how many streams it runs.

A continuous-batching server decodes all its running sequences in each step, and a step
takes longer the more it holds, so one more stream slows every stream there. Each backend's
time per token is learned online (``fleet_speed.FleetSpeed``: ``(base + slope *
concurrency) / speed``, one shape for the fleet from every stream's decode rate and the mean
concurrency it saw, and a speed per backend that differs from the fleet's only where its
interval says so). For each candidate ``b``,
``n = in_flight_b + 1``::

    wait_b    = 0 if n <= cap_b, else (n - cap_b) * mean_job_s_b / cap_b     (no free slot)
    first_b   = (prefill_tokens_b + prompt_cost) * spt_b(1)   (its queued prompts, then this)
    finish_b  = wait_b + first_b + output_tokens * spt_b(min(n, cap_b))
    score_b   = min_c(finish_c) / finish_b                      in (0, 1], 1 for the best

``mean_job_s_b = work_tokens_b / in_flight_b * spt_b(cap_b)``. The choice equalises what a
stream gets, not how many there are: a fast GPU takes streams until its batch has slowed it
to what a slower one would give, a 256-slot server is not filled sixteen times deeper than a
16-slot one just because it can hold more, and an idle backend wins over a busy one of the
same speed. Before a backend's model is fitted its plain learned rate stands in (the fleet's
prior before that). Reads ``in_flight``, ``cap``, ``work_tokens``, ``prefill_tokens`` and the
learned speed from the snapshot; the request's predicted output and prompt cost.

Late binding (a hold policy for ``admission``): when the backend chosen among those
with room would finish the request more than ``hold`` times later than the best of all
eligible backends, full ones included (their finish counts the wait for a slot), the request
waits in the region queue for that difference at most, offered each slot that frees. Off by
default (``hold`` 0; its measured effect: ``docs/research/routing-experiments.md``).

Parameters: ``hold`` (default 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regions.balancer.types import BackendSnapshot, RequestInfo
from routing.params import Param, validate

PARAMS = (Param("hold", 0.0, low=1.0, off=0.0),)


def finish_s(request: RequestInfo, b: BackendSnapshot) -> float:
    """Predicted seconds until ``request`` would end on ``b`` (the formula above)."""
    n = b.in_flight + 1
    cap = max(1, b.cap)
    wait = 0.0
    if n > cap and b.in_flight:
        wait = (n - cap) * b.work_tokens / b.in_flight * b.seconds_per_token(cap) / cap
    first = (b.prefill_tokens + request.prompt_cost) * b.seconds_per_token(1)
    return wait + first + max(request.output_tokens, 1.0) * b.seconds_per_token(min(n, cap))


@dataclass(frozen=True)
class ExpectedFinishScorer:
    hold: float = 0.0
    name: str = "expected-finish"

    def __post_init__(self) -> None:
        validate(self.name, PARAMS, self)

    def score(self, request: RequestInfo, candidates: Sequence[BackendSnapshot]) -> list[float]:
        finish = [finish_s(request, b) for b in candidates]
        best = min(finish)
        return [best / f if f > 0 else 1.0 for f in finish]

    # -- late binding (a hold policy) -------------------------------------------------------

    def acceptable(self, request: RequestInfo, chosen: BackendSnapshot) -> bool:
        return self.hold == 0 or chosen.in_flight == 0

    def hold_s(self, request: RequestInfo, chosen: BackendSnapshot,
               eligible: Sequence[BackendSnapshot]) -> float:
        mine = finish_s(request, chosen)
        best = min((finish_s(request, b) for b in eligible), default=mine)
        return mine - best if mine > self.hold * best else 0.0
