# SPDX-License-Identifier: Apache-2.0
"""Request accounting: what became of each request, by the definitions in docs/drills.md.

A request's outcome is decided by its attempts (``records.AttemptOutcome``):

- ``ok``: its first attempt completed (200 and the stream's ``[DONE]``).
- ``shed_recovered``: an attempt was shed (429/503 with Retry-After) and a later one
  completed.
- ``recovered``: completed after retrying an attempt that produced nothing (no DNS answer,
  connection refused or reset, no response headers in time).
- ``shed``: the last attempt was shed and the client gave up (retries or time ran out); a
  terminal answer, counted in the shed ratio, not lost.
- ``refused``: failed closed: a 451 from a balancer's residency re-check, or a DNS answer
  with no address. Terminal, not lost.
- ``rejected``: another 4xx (the drill's request was wrong).
- ``lost``: no terminal outcome: a timeout, a reset or refused connection with no retry
  left, a 5xx without Retry-After, or a stream cut or stalled before ``[DONE]``.
  ``in_flight_at_fault`` names the fault when a lost request's last attempt was already in
  flight in the region (or on the GPU) that a destructive fault (kill, freeze, hang, fail)
  hit as it started (it started before the injection call returned, and had not ended
  when the call was sent): reported apart, since no router can save those.
- ``not_sent``: the generator was at ``max_in_flight``; ``cancelled``: the drill stopped
  first; ``pending``: not finished yet.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from drills.records import Attempt, AttemptOutcome, FaultRecord, RequestRecord


class Outcome(enum.Enum):
    OK = "ok"
    SHED_RECOVERED = "shed_recovered"
    RECOVERED = "recovered"
    SHED = "shed"
    REFUSED = "refused"
    REJECTED = "rejected"
    LOST = "lost"
    NOT_SENT = "not_sent"
    CANCELLED = "cancelled"
    PENDING = "pending"

    @property
    def completed(self) -> bool:
        return self in (Outcome.OK, Outcome.SHED_RECOVERED, Outcome.RECOVERED)


_LOST_ATTEMPTS = frozenset({
    AttemptOutcome.DNS_TIMEOUT, AttemptOutcome.CONNECT_ERROR, AttemptOutcome.NO_RESPONSE,
    AttemptOutcome.RESET, AttemptOutcome.HTTP_5XX, AttemptOutcome.STREAM_CUT,
    AttemptOutcome.STREAM_STALL,
})
DESTRUCTIVE_FAULTS = frozenset({"region.kill", "region.freeze", "gpu.hang", "gpu.fail",
                                "gpu.kill"})


@dataclass(frozen=True)
class Classified:
    record: RequestRecord
    outcome: Outcome
    reason: str | None = None               # the last attempt's outcome, for lost requests
    in_flight_at_fault: str | None = None   # fault id
    shed_once: bool = False


def _hit_by(attempt: Attempt, fault: FaultRecord) -> bool:
    if fault.type not in DESTRUCTIVE_FAULTS or fault.t_start is None:
        return False
    # the fault lands somewhere between the call's sending and its return
    landed_by = fault.t_applied if fault.t_applied is not None else fault.t_start
    started = attempt.t_start <= landed_by
    ended_after = attempt.t_end is None or attempt.t_end >= fault.t_start
    if not (started and ended_after):
        return False
    if fault.type.startswith("gpu."):
        names = {g.split("/", 1)[-1] for g in fault.gpus}
        return attempt.backend in names if attempt.backend else \
            attempt.answered_region in fault.regions
    return attempt.answered_region in fault.regions


def classify(record: RequestRecord, faults: Sequence[FaultRecord] = ()) -> Classified:
    """The outcome of one request (see the module docstring)."""
    if record.not_sent:
        return Classified(record, Outcome.NOT_SENT)
    attempts = record.attempts
    shed_once = any(a.outcome is AttemptOutcome.SHED for a in attempts)
    final = record.final
    if final is None or final.outcome is None:
        return Classified(record, Outcome.PENDING if not record.finished else Outcome.CANCELLED,
                          shed_once=shed_once)
    last = final.outcome
    if last is AttemptOutcome.CANCELLED:
        return Classified(record, Outcome.CANCELLED, shed_once=shed_once)
    if last is AttemptOutcome.COMPLETED:
        if len(attempts) == 1:
            outcome = Outcome.OK
        elif any(a.outcome is AttemptOutcome.SHED for a in attempts[:-1]):
            outcome = Outcome.SHED_RECOVERED
        else:
            outcome = Outcome.RECOVERED
        return Classified(record, outcome, shed_once=shed_once)
    if last is AttemptOutcome.SHED:
        return Classified(record, Outcome.SHED, shed_once=True)
    if last in (AttemptOutcome.REFUSED, AttemptOutcome.DNS_REFUSED):
        return Classified(record, Outcome.REFUSED, last.value, shed_once=shed_once)
    if last is AttemptOutcome.HTTP_4XX:
        return Classified(record, Outcome.REJECTED, last.value, shed_once=shed_once)
    at_fault = next((f.id for f in faults for a in attempts if a.outcome in _LOST_ATTEMPTS
                     and _hit_by(a, f)), None)
    return Classified(record, Outcome.LOST, last.value, at_fault, shed_once)


@dataclass(frozen=True)
class Tally:
    """Counts over a set of requests, and the ratios the checks read."""

    total: int = 0
    ok: int = 0
    shed_recovered: int = 0
    recovered: int = 0
    shed: int = 0
    refused: int = 0
    rejected: int = 0
    lost: int = 0
    lost_at_fault: int = 0
    not_sent: int = 0
    cancelled: int = 0
    pending: int = 0
    shed_once: int = 0

    @property
    def completed(self) -> int:
        return self.ok + self.shed_recovered + self.recovered

    @property
    def terminal(self) -> int:
        """Requests that ended, one way or another (the denominators below)."""
        return self.completed + self.shed + self.refused + self.rejected + self.lost

    def ratio(self, part: int) -> float | None:
        return part / self.terminal if self.terminal else None

    @property
    def shed_ratio(self) -> float | None:
        """Requests shed at least once (recovered or not) over terminal requests."""
        return self.ratio(self.shed_once)

    @property
    def lost_ratio(self) -> float | None:
        return self.ratio(self.lost)

    @property
    def completed_ratio(self) -> float | None:
        return self.ratio(self.completed)

    def as_dict(self) -> dict[str, int | float | None]:
        out: dict[str, int | float | None] = {k: getattr(self, k)
                                              for k in self.__dataclass_fields__}
        out.update(completed=self.completed, terminal=self.terminal,
                   shed_ratio=self.shed_ratio, lost_ratio=self.lost_ratio,
                   completed_ratio=self.completed_ratio)
        return out


def tally(items: Iterable[Classified]) -> Tally:
    counts = dict.fromkeys(Tally.__dataclass_fields__, 0)
    for c in items:
        counts["total"] += 1
        counts[c.outcome.value] += 1
        counts["shed_once"] += c.shed_once
        counts["lost_at_fault"] += c.outcome is Outcome.LOST and c.in_flight_at_fault is not None
    return Tally(**counts)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ttfts(items: Iterable[Classified]) -> list[float]:
    """Time to first token of completed requests: from the start of the attempt that
    completed (its DNS query) to the first generated token."""
    out = []
    for c in items:
        final = c.record.final
        if c.outcome.completed and final is not None and final.ttft is not None:
            out.append(final.ttft)
    return out


def in_window(items: Iterable[Classified], start: float, end: float,
              cohorts: Iterable[str] = ()) -> list[Classified]:
    """Requests issued in [start, end), of the given cohorts (none given: all)."""
    wanted = set(cohorts)
    return [c for c in items if start <= c.record.t_issue < end
            and (not wanted or c.record.cohort in wanted)]
