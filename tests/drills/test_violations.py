# SPDX-License-Identifier: Apache-2.0
"""Residency violation evidence: DNS answers and the served-region header."""

from __future__ import annotations

from drills.records import AttemptOutcome as A
from drills.violations import attempt_violations, violations
from tests.drills.synthetic import attempt, ok, region_of, request

EU = frozenset({"eu-west", "eu-central"})


def test_clean_requests_have_no_violation() -> None:
    records = [ok("eu", 1, "eu-west"), ok("eu", 2, "eu-central"), ok("us", 3, "us-east")]
    assert violations(records, {"eu": EU, "us": None}, region_of) == []


def test_dns_answer_outside_the_allowed_regions() -> None:
    record = request("eu", 5, attempt("us-east", A.CONNECT_ERROR, t=5, served=None))
    (v,) = violations([record], {"eu": EU}, region_of)
    assert (v.evidence, v.region, v.t) == ("dns", "us-east", 5)
    assert "DNS answered 127.0.1.1" in v.describe()


def test_every_address_of_an_answer_is_checked() -> None:
    a = attempt("eu-west", A.COMPLETED, t=1, addresses=("127.0.2.1", "127.0.1.1"))
    record = request("eu", 1, a)
    found = attempt_violations(record, a, EU, region_of)
    assert [v.region for v in found] == ["us-east"]


def test_an_unknown_address_is_a_violation() -> None:
    a = attempt(None, A.CONNECT_ERROR, t=1, addresses=("192.0.2.7",))
    (v,) = attempt_violations(request("eu", 1, a), a, EU, region_of)
    assert v.region is None and v.evidence == "dns"


def test_served_region_header_outside_the_allowed_regions() -> None:
    # DNS said eu-west, but the response came from us-east (a misrouted proxy)
    record = request("eu", 2, attempt("eu-west", A.COMPLETED, t=2, served="us-east"))
    (v,) = violations([record], {"eu": EU}, region_of)
    assert (v.evidence, v.region) == ("served", "us-east")


def test_a_451_refusal_is_the_defence_working_not_a_service() -> None:
    a = attempt("eu-west", A.REFUSED, t=2, served="us-east")
    assert attempt_violations(request("eu", 2, a), a, EU, region_of) == []


def test_cohorts_without_residency_are_not_checked() -> None:
    assert violations([ok("uk", 1, "us-east")], {"uk": None}, region_of) == []


def test_violations_come_in_time_order() -> None:
    records = [request("eu", 9, attempt("us-east", A.COMPLETED, t=9)),
               request("eu", 3, attempt("ap-south", A.COMPLETED, t=3))]
    found = violations(records, {"eu": EU}, region_of)
    assert [v.t for v in found] == sorted(v.t for v in found)
    assert found[0].region == "ap-south"
