# SPDX-License-Identifier: Apache-2.0
"""Failover time, measured from the client side.

Failover time is the time from the fault's start until 99% (``share``) of a cohort's
requests over a 5 s ``window`` are served by surviving allowed regions: the smallest
``T - fault_start`` such that, of the cohort's requests issued in ``[T, T + window)``, at
least ``min_requests`` exist and at least ``share`` of them were served by a surviving
allowed region. ``T`` runs over the fault's start and every later request's issue time;
the window must end while the fault is still on (a fault undone first leaves the failover
unmeasured).

"Served by" reads the request's **first** attempt, so it measures steering rather than the
client's retries: the attempt got an HTTP response and both the answered address's region
and the ``x-director-region`` header (when present) are in the surviving set. Surviving =
the cohort's allowed regions (every region, for a cohort without residency) minus the
regions the fault hit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drills.records import RequestRecord


@dataclass(frozen=True)
class FailoverResult:
    seconds: float | None           # None: the cohort never moved while the fault was on
    window_start: float | None
    requests: int                   # in the deciding window
    served: int


def served_by(record: RequestRecord, surviving: frozenset[str]) -> bool:
    first = record.first
    if first is None or first.status is None:
        return False
    if first.region is not None and first.region not in surviving:
        return False
    return first.answered_region in surviving


def failover_time(records: Iterable[RequestRecord], cohorts: Iterable[str], fault_start: float,
                  fault_end: float, surviving: frozenset[str], *, share: float = 0.99,
                  window: float = 5.0, min_requests: int = 5) -> FailoverResult:
    wanted = set(cohorts)
    reqs = sorted((r for r in records if r.cohort in wanted and not r.not_sent
                   and fault_start <= r.t_issue < fault_end and r.attempts),
                  key=lambda r: r.t_issue)
    good = [served_by(r, surviving) for r in reqs]
    starts = [fault_start] + [r.t_issue for r in reqs]
    hi = 0
    count = served = 0
    lo = 0
    for t in starts:
        if t + window > fault_end + 1e-9:
            break
        while lo < len(reqs) and reqs[lo].t_issue < t:
            if lo < hi:
                count -= 1
                served -= good[lo]
            lo += 1
        hi = max(hi, lo)
        while hi < len(reqs) and reqs[hi].t_issue < t + window:
            count += 1
            served += good[hi]
            hi += 1
        if count >= min_requests and served >= share * count:
            return FailoverResult(round(t - fault_start, 3), t, count, served)
    return FailoverResult(None, None, 0, 0)
