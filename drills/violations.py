# SPDX-License-Identifier: Apache-2.0
"""Residency violations: any answer or service of a residency cohort outside its regions.

Two kinds of evidence, both from the client side:

- ``dns``: an address in a DNS answer given to the cohort's subnet (ECS) that belongs to a
  region outside the cohort's allowed set, or to no known region at all (an address that
  cannot be shown to be allowed is not allowed);
- ``served``: a response whose ``x-director-region`` header names a region outside the
  allowed set. A 451 is the balancer refusing the client (the defence working), so it is
  not a service.

The first violation fails the drill and stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from drills.records import Attempt, RequestRecord

RegionOf = Callable[[str], str | None]


@dataclass(frozen=True)
class Violation:
    request: str
    cohort: str
    subnet: str
    attempt: int
    t: float
    evidence: str              # dns | served
    region: str | None         # None: an address no region owns
    detail: str
    allowed: tuple[str, ...]

    def describe(self) -> str:
        where = self.region or "an unknown region"
        return (f"t={self.t:.2f}s {self.cohort} {self.subnet} request {self.request}: "
                f"{self.evidence} evidence {self.detail} -> {where}, allowed: "
                f"{', '.join(self.allowed)}")


def attempt_violations(record: RequestRecord, attempt: Attempt, allowed: frozenset[str],
                       region_of: RegionOf) -> list[Violation]:
    """Violations in one attempt of a residency cohort's request."""
    out = []
    names = tuple(sorted(allowed))
    if attempt.dns is not None:
        for address in attempt.dns.addresses:
            region = region_of(address)
            if region is None or region not in allowed:
                out.append(Violation(record.id, record.cohort, record.subnet, attempt.n,
                                     attempt.dns.t, "dns", region,
                                     f"DNS answered {address}", names))
    if attempt.served_region is not None and attempt.status not in (None, 451) \
            and attempt.served_region not in allowed:
        t = attempt.t_headers if attempt.t_headers is not None else attempt.t_start
        out.append(Violation(record.id, record.cohort, record.subnet, attempt.n, t, "served",
                             attempt.served_region,
                             f"HTTP {attempt.status} from x-director-region "
                             f"{attempt.served_region}", names))
    return out


def violations(records: Iterable[RequestRecord],
               allowed_by_cohort: Mapping[str, frozenset[str] | None],
               region_of: RegionOf) -> list[Violation]:
    """Every violation among the records' attempts, in time order."""
    out: list[Violation] = []
    for record in records:
        allowed = allowed_by_cohort.get(record.cohort)
        if allowed is None:
            continue
        for attempt in record.attempts:
            out.extend(attempt_violations(record, attempt, allowed, region_of))
    out.sort(key=lambda v: v.t)
    return out
