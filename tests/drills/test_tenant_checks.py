# SPDX-License-Identifier: Apache-2.0
"""Tenant drills without a system: the file's tenants and tenant.flood faults, the schedule
they make (shares held exactly, the flood's own arrivals), and the tenant checks (ttft and
goodput against the window before, throttled against a quota) over synthetic records."""

from __future__ import annotations

import pytest

from drills.arrivals import build_schedule, tenant_order
from drills.checks import Judge
from drills.errors import DrillError, DrillFileError
from drills.loader import load_drill_text
from drills.model import FaultType, TenantShare
from drills.records import AttemptOutcome as A
from drills.tenant_keys import TenantInfo, flood_rates
from drills.throttling import throttling
from tests.drills.synthetic import attempt, ok, region_of, request

DRILL = """\
apiVersion: drill/v1
kind: Drill
metadata: {name: flood}
load:
  service: chat
  request: {model: m, max_tokens: 8, prompt_tokens: 50}
  rate: {rps: 10, arrivals: uniform}
  phases: [{name: steady, duration: 10s}, {name: flood, duration: 10s},
           {name: after, duration: 5s}]
  cohorts: [{name: all, countries: [US], share: 1}]
  tenants:
    - {name: gold, share: 0.5}
    - {name: silver, share: 0.3}
    - {name: bronze, share: 0.2}
method:
  - id: flood
    type: tenant.flood
    start: {phase: flood}
    duration: 10s
    params: {tenant: bronze, multiplier: MULTIPLIER}
checks:
  - {name: others-ttft, type: ttft, tenants: [gold, silver],
     compare_to: {when: before, max_ratio: 1.2}}
  - {name: others-goodput, type: goodput, tenants: [gold, silver],
     compare_to: {when: before, min_ratio: 0.9}}
  - {name: throttled, type: throttled, tenants: [bronze]}
"""


def drill_text(multiplier: str = "12", extra: str = "") -> str:
    return DRILL.replace("MULTIPLIER", multiplier) + extra


@pytest.fixture
def drill():
    return load_drill_text(drill_text(), "flood.yaml")


def judge_of(drill, quotas) -> Judge:
    return Judge(drill, {"all": None}, region_of, ("us-east",), quotas)


def check(drill, name):
    return next(c for c in drill.checks if c.name == name)


def test_the_file_reads_tenants_floods_and_tenant_checks(drill) -> None:
    assert drill.load.tenants == (TenantShare("gold", 0.5), TenantShare("silver", 0.3),
                                  TenantShare("bronze", 0.2))
    (flood,) = drill.faults
    assert flood.type is FaultType.TENANT_FLOOD and flood.start == 10 and flood.end == 20
    assert flood.params == {"tenant": "bronze", "multiplier": 12.0, "rate": None}
    assert drill.injected_faults == ()  # load, not an admin API call
    assert drill.tenant_names == ("gold", "silver", "bronze")
    throttled = check(drill, "throttled")
    assert throttled.tenants == ("bronze",) and throttled.expect.min == 0.9
    assert throttled.params == {"min_admitted": 0.8, "burst": 60.0}
    assert check(drill, "others-ttft").params["compare_to"] == {"when": "before",
                                                                 "max_ratio": 1.2}


@pytest.mark.parametrize(("text", "message"), [
    (drill_text().replace("share: 0.2}", "share: 0.3}"), "tenant shares add up to 1.1"),
    (drill_text(extra="  - {name: x, type: throttled, tenants: [platinum]}\n"),
     "unknown tenant 'platinum'"),
    (drill_text(extra="  - {name: x, type: throttled}\n"),
     "a throttled check needs the tenants it judges"),
    (drill_text(extra="  - {name: x, type: ttft, compare_to: {when: before, cohort: all, "
                      "max_ratio: 2}}\n"), "not both"),
    (drill_text(extra="  - {name: x, type: ttft, when: before, compare_to: {when: before, "
                      "max_ratio: 2}}\n"), "is the check's own window"),
    (drill_text(extra="  - {name: x, type: goodput, compare_to: {when: before, "
                      "max_ratio: 2}}\n"), "compare_to needs min_ratio"),
    (drill_text(extra="  - {name: x, type: goodput}\n"), "a goodput check needs expect"),
    (drill_text().replace("multiplier: 12}", "}"), "missing required key 'multiplier'"),
    (drill_text().replace("  tenants:\n    - {name: gold, share: 0.5}\n"
                          "    - {name: silver, share: 0.3}\n    - {name: bronze, "
                          "share: 0.2}\n", "").split("checks:")[0],
     "a tenant.flood needs load.tenants"),
], ids=["shares", "unknown-tenant", "throttled-alone", "compare-both", "compare-self",
        "goodput-ratio", "goodput-bare", "no-multiplier", "flood-without-tenants"])
def test_mistakes_are_reported_where_they_are(text: str, message: str) -> None:
    with pytest.raises(DrillFileError) as caught:
        load_drill_text(text, "flood.yaml")
    assert message in caught.value.render(), caught.value.render()


def test_tenant_shares_hold_exactly_over_any_stretch() -> None:
    order = tenant_order((TenantShare("a", 0.5), TenantShare("b", 0.3),
                          TenantShare("c", 0.2)), 100)
    for start in (0, 10, 40):
        window = order[start:start + 10]
        assert (window.count("a"), window.count("b"), window.count("c")) == (5, 3, 2)
    assert tenant_order((), 3) == [None, None, None]


def test_the_flood_sends_n_times_the_quota_in_all(drill) -> None:
    rates = flood_rates(drill, {"bronze": TenantInfo("bronze", 60.0)})
    assert rates == {"flood": 12.0}  # 12 x 60/min
    schedule = build_schedule(drill.load, drill.faults, flood_rates=rates)
    bronze = [a for a in schedule.arrivals if a.tenant == "bronze"]
    during = [a for a in bronze if 10 <= a.t < 20]
    assert len(during) == 120  # 12 rps for 10 s: its share (2 rps) and 10 rps of its own
    assert len([a for a in bronze if a.t < 10]) == 20
    assert [a.seq for a in schedule.arrivals] == list(range(len(schedule.arrivals)))
    assert all(a.t <= b.t for a, b in zip(schedule.arrivals, schedule.arrivals[1:],
                                          strict=False))
    others = [a for a in schedule.arrivals if a.tenant in ("gold", "silver")]
    assert len(others) == 200  # 8 rps over 25 s: the flood adds nothing of theirs
    without = build_schedule(drill.load, drill.faults)  # unresolved: no arrivals of its own
    assert len(without.arrivals) == 250


def test_a_flood_needs_a_quota_or_a_rate(drill) -> None:
    with pytest.raises(DrillError, match="no requests quota"):
        flood_rates(drill, {"bronze": TenantInfo("bronze", None)})
    given = load_drill_text(drill_text("3, rate: 2"), "flood.yaml")
    assert flood_rates(given, {"bronze": TenantInfo("bronze", None)}) == {"flood": 6.0}


def steady(tenant: str, start: float, end: float, ttft: float, rps: float = 4.0):
    n = round((end - start) * rps)
    return [ok("all", start + i / rps, "us-east", ttft=ttft, tenant=tenant) for i in range(n)]


def test_others_ttft_and_goodput_against_before(drill) -> None:
    judge = judge_of(drill, {"bronze": 60.0})
    records = steady("gold", 0, 10, 0.10) + steady("gold", 10, 25, 0.11) \
        + steady("bronze", 0, 25, 5.0)  # bronze's own latency is not the others'
    ttft = judge.evaluate(check(drill, "others-ttft"), records, [], 25.0)
    assert ttft.passed and ttft.data["ratio"] == pytest.approx(1.1)
    assert ttft.expected == "<= 1.2x before"
    slow = records + steady("silver", 10, 20, 0.2, rps=1)
    assert not judge.evaluate(check(drill, "others-ttft"), slow, [], 25.0).passed
    goodput = judge.evaluate(check(drill, "others-goodput"), records, [], 25.0)
    assert goodput.passed and goodput.value == pytest.approx(4.0)
    assert "1.00x before (4.00/s)" in goodput.detail
    starved = [r for r in records if not (10 <= r.t_issue < 20 and r.seq % 2)]
    result = judge.evaluate(check(drill, "others-goodput"), starved, [], 25.0)
    assert not result.passed and result.data["ratio"] < 0.9


def bronze(t: float, *statuses: int, retry_after: float | None = 1.0):
    """A bronze request whose attempts, a second apart, were answered ``statuses``."""
    attempts = []
    for n, status in enumerate(statuses):
        outcome = A.COMPLETED if status == 200 else A.SHED if retry_after else A.HTTP_4XX
        attempts.append(attempt("us-east", outcome, t=t + n, n=n, status=status,
                                retry_after=retry_after if status == 429 else None))
    return request("all", t, *attempts, tenant="bronze")


def test_throttled_holds_when_the_excess_is_refused_with_retry_after(drill) -> None:
    judge = judge_of(drill, {"bronze": 60.0})
    # 10 s at 60/min with a minute's burst: at most 70 admitted; 100 sent, 30 refused
    records = [bronze(10 + i / 10, 200 if i < 70 else 429) for i in range(100)]
    result = judge.evaluate(check(drill, "throttled"), records, [], 25.0)
    assert result.passed, result.detail
    assert result.value == pytest.approx(1.0)
    assert result.data["bronze"]["excess"] == 30 and result.data["bronze"]["admitted"] == 70
    assert "bronze: 100 answers in 10.0s, 70 admitted, 30 refused with 429" in result.detail


def test_throttled_fails_without_an_excess_or_without_retry_after(drill) -> None:
    judge = judge_of(drill, {"bronze": 60.0})
    under = [bronze(10 + i / 10, 200) for i in range(50)]
    result = judge.evaluate(check(drill, "throttled"), under, [], 25.0)
    assert not result.passed and result.value is None
    assert "never went above its quota" in result.detail
    bare = [bronze(10 + i / 10, 200 if i < 70 else 429,
                   retry_after=1.0 if i % 2 else None) for i in range(100)]
    result = judge.evaluate(check(drill, "throttled"), bare, [], 25.0)
    assert not result.passed and "429s without Retry-After" in result.detail
    starved = [bronze(10 + i / 10, 429) for i in range(100)]  # refuses its quota too
    result = judge.evaluate(check(drill, "throttled"), starved, [], 25.0)
    assert not result.passed and "under the 8 its quota's rate owes it" in result.detail
    unknown = judge_of(drill, {}).evaluate(check(drill, "throttled"), under, [], 25.0)
    assert not unknown.passed and "no requests quota" in unknown.detail


def test_retries_are_calls_on_the_quota_too() -> None:
    records = [bronze(10 + i / 10, 429, 429, 200) for i in range(20)]
    judged = throttling(records, "bronze", (), 10.0, 20.0, 6.0, 0.8)
    assert (judged.answered, judged.refused, judged.admitted) == (60, 40, 20)
    assert judged.allowance == pytest.approx(7.0)  # 0.1/s over 10 s + a minute's burst
