# SPDX-License-Identifier: Apache-2.0
"""Failover time: from the fault's start until 99% of a cohort's requests over 5 s are
served by surviving allowed regions (synthetic streams with a known answer)."""

from __future__ import annotations

import pytest

from drills.failover import failover_time, served_by
from drills.records import AttemptOutcome as A
from tests.drills.synthetic import attempt, ok, request

SURVIVING = frozenset({"eu-central"})


def stream(moved_at: float, *, rate: float = 10.0, start: float = 0.0, end: float = 40.0,
           cohort: str = "eu"):
    """A cohort on eu-west until ``moved_at``, then on eu-central (10 requests a second)."""
    out = []
    n = int((end - start) * rate)
    for i in range(n):
        t = start + i / rate
        out.append(ok(cohort, t, "eu-west" if t < moved_at else "eu-central"))
    return out


@pytest.mark.parametrize("moved_at", [10.0, 12.0, 16.5, 25.0])
def test_failover_time_is_when_the_cohort_moved(moved_at: float) -> None:
    result = failover_time(stream(moved_at), ["eu"], 10.0, 40.0, SURVIVING)
    assert result.seconds == pytest.approx(moved_at - 10.0, abs=0.11)
    assert result.served == result.requests >= 5


def test_one_straggler_in_a_hundred_is_within_the_99_percent() -> None:
    records = stream(12.0)
    # every 5 s window from 12 s on holds 50 requests; a single eu-west answer in a window
    # of 100 (at 20 rps) would pass, one in 50 does not
    records.append(ok("eu", 14.0, "eu-west"))
    result = failover_time(records, ["eu"], 10.0, 40.0, SURVIVING)
    assert result.seconds == pytest.approx(4.1, abs=0.11)  # the window after the straggler
    dense = [*stream(12.0, rate=20.0), ok("eu", 14.0, "eu-west")]
    assert failover_time(dense, ["eu"], 10.0, 40.0, SURVIVING).seconds == \
        pytest.approx(2.0, abs=0.06)


def test_never_moved_while_the_fault_was_on() -> None:
    result = failover_time(stream(50.0), ["eu"], 10.0, 40.0, SURVIVING)
    assert result.seconds is None


def test_the_window_must_close_before_the_fault_ends() -> None:
    # moved at 37 s: the window [37, 42) ends after the fault (40 s): not measured
    assert failover_time(stream(37.0, end=45.0), ["eu"], 10.0, 40.0, SURVIVING).seconds is None


def test_too_few_requests_in_a_window_do_not_decide() -> None:
    sparse = stream(12.0, rate=0.5)  # 2-3 requests per 5 s window
    assert failover_time(sparse, ["eu"], 10.0, 40.0, SURVIVING, min_requests=5).seconds is None


def test_other_cohorts_do_not_count() -> None:
    records = stream(12.0) + stream(30.0, cohort="uk")
    assert failover_time(records, ["eu"], 10.0, 40.0, SURVIVING).seconds == \
        pytest.approx(2.0, abs=0.11)


def test_served_by_reads_the_first_attempt() -> None:
    retried = request("eu", 11, attempt("eu-west", A.CONNECT_ERROR, t=11),
                      attempt("eu-central", A.COMPLETED, t=12, n=1))
    assert not served_by(retried, SURVIVING)  # steering had not moved yet
    shed = request("eu", 11, attempt("eu-central", A.SHED, t=11, retry_after=1))
    assert served_by(shed, SURVIVING)  # answered by eu-central, which is full but alive
    header_elsewhere = request("eu", 11, attempt("eu-central", A.COMPLETED, t=11,
                                                 served="eu-west"))
    assert not served_by(header_elsewhere, SURVIVING)
    dns_only = request("eu", 11, attempt(None, A.DNS_REFUSED, t=11))
    assert not served_by(dns_only, SURVIVING)
