# SPDX-License-Identifier: Apache-2.0
"""A tenant's throttling, measured from the client side against its request quota.

The balancers enforce a quota of R requests per minute with GCRA (``tenants.quota``): the
bucket refills at R/60 per second and holds ``burst`` seconds of it (a minute), so in a
window of W seconds at most ``R/60 * (W + burst)`` requests can be admitted, whatever the
bucket held when the window opened. Every attempt counts (a retry after a 429 is another
call on the quota): the attempts of the tenant that started in the window and got an
answer are ``answered``; those above the allowance are the ``excess``, which the balancers
must refuse with 429 and ``Retry-After``. The tenant must still get its quota's rate:
``min_admitted`` of ``R/60 * W`` admitted (200).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drills.records import RequestRecord


@dataclass(frozen=True)
class Throttling:
    """One tenant's answers in a window, against its request quota."""

    answered: int            # attempts that got an HTTP status
    admitted: int            # ... 200
    refused: int             # ... 429
    with_retry_after: int    # ... 429 carrying Retry-After
    allowance: float         # the most the quota admits in the window (rate and burst)
    floor: float             # what the tenant must still get (min_admitted of the rate)
    seconds: float
    rpm: float

    @property
    def excess(self) -> float:
        return self.answered - self.allowance

    @property
    def ratio(self) -> float | None:
        """Share of the excess refused with 429 and Retry-After; None: no excess."""
        return self.with_retry_after / self.excess if self.excess > 0 else None

    @property
    def holds(self) -> bool:
        return self.with_retry_after == self.refused and self.admitted >= self.floor

    def describe(self, tenant: str) -> str:
        head = (f"{tenant}: {self.answered} answers in {self.seconds:.1f}s, {self.admitted} "
                f"admitted, {self.refused} refused with 429 ({self.with_retry_after} with "
                f"Retry-After); its quota ({self.rpm:g}/min) admits at most "
                f"{self.allowance:.0f} in that time")
        if self.ratio is None:
            return head + ": it never went above its quota, nothing to throttle"
        notes = [f"{self.ratio:.2f}x the {self.excess:.0f} above it refused"]
        if self.with_retry_after < self.refused:
            notes.append(f"{self.refused - self.with_retry_after} 429s without Retry-After")
        if self.admitted < self.floor:
            notes.append(f"under the {self.floor:.0f} its quota's rate owes it")
        return head + ": " + ", ".join(notes)

    def as_dict(self) -> dict[str, Any]:
        return {"answered": self.answered, "admitted": self.admitted,
                "refused": self.refused, "with_retry_after": self.with_retry_after,
                "allowance": round(self.allowance, 3), "excess": round(self.excess, 3),
                "floor": round(self.floor, 3), "seconds": round(self.seconds, 3),
                "requests_per_minute": self.rpm, "ratio": self.ratio}


def throttling(records: Sequence[RequestRecord], tenant: str, cohorts: Sequence[str],
               start: float, end: float, rpm: float, min_admitted: float,
               burst: float = 60.0) -> Throttling:
    """Every attempt of ``tenant`` that started in ``[start, end)`` and got an answer (a
    retry after a 429 is another call on the quota), judged against ``rpm`` with a bucket
    of ``burst`` seconds."""
    answered = [a for r in records if r.tenant == tenant and (not cohorts or r.cohort in cohorts)
                for a in r.attempts if start <= a.t_start < end and a.status is not None]
    refused = [a for a in answered if a.status == 429]
    seconds = max(0.0, end - start)
    rate = rpm / 60.0
    return Throttling(len(answered), sum(1 for a in answered if a.status == 200),
                      len(refused), sum(1 for a in refused if a.retry_after is not None),
                      rate * (seconds + burst), min_admitted * rate * seconds, seconds, rpm)
