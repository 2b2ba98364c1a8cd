# SPDX-License-Identifier: Apache-2.0
"""Synthetic request records for the pure accounting, failover and check tests."""

from __future__ import annotations

import itertools
from typing import Any

from drills.records import (
    Attempt,
    AttemptOutcome,
    DnsAnswer,
    FaultRecord,
    RequestRecord,
)

ADDRESSES = {"us-east": "127.0.1.1", "eu-west": "127.0.2.1", "eu-central": "127.0.3.1",
             "ap-south": "127.0.4.1"}
REGIONS = {v: k for k, v in ADDRESSES.items()}
_ids = itertools.count()


def region_of(address: str) -> str | None:
    return REGIONS.get(address)


def attempt(region: str | None, outcome: AttemptOutcome, *, t: float = 0.0, n: int = 0,
            status: int | None = None, served: str | bool | None = True,
            duration: float = 0.5, retry_after: float | None = None,
            addresses: tuple[str, ...] | None = None, backend: str | None = None,
            ttft: float | None = 0.1, error: str | None = None) -> Attempt:
    """One attempt: answered ``region`` by DNS; ``served`` True = the header names it too."""
    answered = addresses if addresses is not None else \
        ((ADDRESSES[region],) if region else ())
    dns = DnsAnswer(t, "127.0.0.1:53", "NOERROR", answered, 5)
    if status is None:
        status = {AttemptOutcome.COMPLETED: 200, AttemptOutcome.SHED: 429,
                  AttemptOutcome.REFUSED: 451, AttemptOutcome.HTTP_5XX: 503,
                  AttemptOutcome.HTTP_4XX: 400, AttemptOutcome.STREAM_CUT: 200,
                  AttemptOutcome.STREAM_STALL: 200}.get(outcome)
    header = region if served is True else (served or None)
    done = outcome is AttemptOutcome.COMPLETED
    return Attempt(
        n=n, t_start=t, dns=dns, address=answered[0] if answered else None, region=region,
        status=status, served_region=header if status is not None else None, backend=backend,
        retry_after=retry_after, t_headers=t + 0.01 if status is not None else None,
        t_first_token=t + ttft if done and ttft is not None else None,
        t_end=t + duration, chunks=3 if done else 0, done=done, error=error, outcome=outcome)


def request(cohort: str, t: float, *attempts: Attempt, **fields: Any) -> RequestRecord:
    i = next(_ids)
    record = RequestRecord(id=f"r{i}", seq=i, cohort=cohort, subnet="81.2.69.0/24",
                           client_ip="81.2.69.10", t_issue=t, prompt_tokens=100,
                           output_tokens=16, attempts=list(attempts), finished=True,
                           t_end=t + 1.0, **fields)
    return record


def ok(cohort: str, t: float, region: str, tenant: str | None = None,
       **kw: Any) -> RequestRecord:
    return request(cohort, t, attempt(region, AttemptOutcome.COMPLETED, t=t, **kw),
                   tenant=tenant)


def fault(fid: str = "kill", kind: str = "region.kill", start: float = 10.0, end: float = 30.0,
          regions: tuple[str, ...] = ("eu-west",), gpus: tuple[str, ...] = ()) -> FaultRecord:
    return FaultRecord(fid, kind, start, end, t_start=start, t_end=end, regions=regions,
                       gpus=gpus, restored=True)
