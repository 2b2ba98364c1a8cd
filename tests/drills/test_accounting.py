# SPDX-License-Identifier: Apache-2.0
"""Request accounting over synthetic event streams: the definitions in docs/drills.md."""

from __future__ import annotations

import pytest

from drills.accounting import Outcome, classify, quantile, tally, ttfts
from drills.records import AttemptOutcome as A
from tests.drills.synthetic import attempt, fault, ok, request

KILL = fault("kill", "region.kill", start=10.0, end=30.0, regions=("eu-west",))
HANG = fault("hang", "gpu.hang", start=10.0, end=30.0, regions=("us-east",),
             gpus=("us-east/gpu0",))

CASES = {
    "first-try": (request("eu", 1, attempt("eu-west", A.COMPLETED, t=1)), Outcome.OK, None),
    "shed-and-recovered": (
        request("eu", 1, attempt("eu-west", A.SHED, t=1, retry_after=1.0),
                attempt("eu-central", A.COMPLETED, t=2.5, n=1)),
        Outcome.SHED_RECOVERED, None),
    "retried-after-connect-error": (
        request("eu", 11, attempt("eu-west", A.CONNECT_ERROR, t=11),
                attempt("eu-central", A.COMPLETED, t=12, n=1)),
        Outcome.RECOVERED, None),
    "shed-gave-up": (
        request("eu", 1, attempt("eu-west", A.SHED, t=1, retry_after=30.0)),
        Outcome.SHED, None),
    "refused-by-balancer": (request("eu", 1, attempt("us-east", A.REFUSED, t=1)),
                            Outcome.REFUSED, None),
    "dns-answered-nothing": (request("eu", 1, attempt(None, A.DNS_REFUSED, t=1)),
                             Outcome.REFUSED, None),
    "bad-request": (request("eu", 1, attempt("eu-west", A.HTTP_4XX, t=1)),
                    Outcome.REJECTED, None),
    "lost-no-terminal-outcome-timeout": (
        request("eu", 1, attempt("eu-west", A.NO_RESPONSE, t=1)), Outcome.LOST, None),
    "lost-dns-timeout": (request("eu", 1, attempt(None, A.DNS_TIMEOUT, t=1)),
                         Outcome.LOST, None),
    "lost-reset": (request("eu", 1, attempt("eu-west", A.RESET, t=1)), Outcome.LOST, None),
    "lost-5xx-without-retry-after": (
        request("eu", 1, attempt("eu-west", A.HTTP_5XX, t=1, status=502)),
        Outcome.LOST, None),
    "lost-stream-cut-before-done": (
        request("eu", 1, attempt("eu-west", A.STREAM_CUT, t=1)), Outcome.LOST, None),
    "lost-stream-stalled": (request("eu", 1, attempt("eu-west", A.STREAM_STALL, t=1)),
                            Outcome.LOST, None),
    "lost-retries-exhausted": (
        request("eu", 11, *(attempt("eu-west", A.CONNECT_ERROR, t=11 + i, n=i)
                            for i in range(3))),
        Outcome.LOST, None),
    "cut-by-the-kill-is-in-flight-at-fault": (
        request("eu", 9.8, attempt("eu-west", A.STREAM_CUT, t=9.8, duration=0.5)),
        Outcome.LOST, "kill"),
    "cut-elsewhere-is-not-at-fault": (
        request("eu", 9.8, attempt("eu-central", A.STREAM_CUT, t=9.8, duration=0.5)),
        Outcome.LOST, None),
    "sent-after-the-kill-is-not-in-flight-at-it": (
        request("eu", 10.5, attempt("eu-west", A.STREAM_CUT, t=10.5)), Outcome.LOST, None),
    "ended-before-the-kill": (
        request("eu", 8, attempt("eu-west", A.STREAM_CUT, t=8, duration=1.0)),
        Outcome.LOST, None),
    "stalled-on-the-hung-gpu": (
        request("us", 9.5, attempt("us-east", A.STREAM_STALL, t=9.5, duration=10,
                                   backend="gpu0")), Outcome.LOST, "hang"),
    "stalled-on-another-gpu": (
        request("us", 9.5, attempt("us-east", A.STREAM_STALL, t=9.5, duration=10,
                                   backend="gpu1")), Outcome.LOST, None),
    "cancelled-by-the-drill": (request("eu", 1, attempt("eu-west", A.CANCELLED, t=1)),
                               Outcome.CANCELLED, None),
    "not-sent": (request("eu", 1, not_sent=True), Outcome.NOT_SENT, None),
}


@pytest.mark.parametrize(("record", "outcome", "at_fault"), CASES.values(), ids=CASES.keys())
def test_classify(record, outcome: Outcome, at_fault: str | None) -> None:
    c = classify(record, [KILL, HANG])
    assert c.outcome is outcome
    assert c.in_flight_at_fault == at_fault


def test_pending_request_is_not_counted_as_anything_final() -> None:
    record = request("eu", 1, attempt("eu-west", A.COMPLETED, t=1))
    record.attempts[0].outcome = None
    record.finished = False
    assert classify(record).outcome is Outcome.PENDING


def test_tally_ratios() -> None:
    records = [ok("eu", i, "eu-west") for i in range(6)]
    records.append(request("eu", 7, attempt("eu-west", A.SHED, t=7, retry_after=1),
                           attempt("eu-west", A.COMPLETED, t=8, n=1)))
    records.append(request("eu", 8, attempt("eu-west", A.SHED, t=8, retry_after=1)))
    records.append(request("eu", 9, attempt("eu-west", A.STREAM_CUT, t=9.8)))
    records.append(request("eu", 8, attempt("eu-west", A.STREAM_CUT, t=8)))
    records.append(request("eu", 9, not_sent=True))
    t = tally(classify(r, [KILL]) for r in records)
    assert (t.total, t.completed, t.shed_recovered, t.shed, t.lost, t.not_sent) == \
        (11, 7, 1, 1, 2, 1)
    assert t.lost_at_fault == 1
    assert t.terminal == 10
    assert t.shed_ratio == pytest.approx(2 / 10)
    assert t.lost_ratio == pytest.approx(2 / 10)
    assert t.completed_ratio == pytest.approx(7 / 10)


def test_ttft_is_measured_on_the_attempt_that_completed() -> None:
    records = [request("eu", 0, attempt("eu-west", A.CONNECT_ERROR, t=0),
                       attempt("eu-central", A.COMPLETED, t=3, n=1, ttft=0.2))]
    assert ttfts(classify(r) for r in records) == [pytest.approx(0.2)]


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 0.99, None), ([1.0], 0.99, 1.0), (list(range(1, 101)), 0.99, 99),
    (list(range(1, 101)), 0.5, 50), ([3.0, 1.0, 2.0], 1.0, 3.0)])
def test_quantile_nearest_rank(values, q, expected) -> None:
    assert quantile(values, q) == expected


def test_an_attempt_sent_while_the_kill_was_being_applied_was_in_flight_at_it() -> None:
    """The runner sends the kill at 10.0 and it returns at 10.4: the fault landed somewhere
    in between, so a stream sent at 10.1 and cut was already inside the region."""
    kill = fault()
    kill.t_applied = 10.4
    cut = request("eu", 10.1, attempt("eu-west", A.STREAM_CUT, t=10.1, duration=0.5))
    assert classify(cut, [kill]).in_flight_at_fault == "kill"
    later = request("eu", 10.5, attempt("eu-west", A.STREAM_CUT, t=10.5, duration=0.5))
    assert classify(later, [kill]).in_flight_at_fault is None
