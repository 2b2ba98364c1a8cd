"""The residency proof: each decision path, leaking and not leaking (table tests)."""

from __future__ import annotations

import pytest

from policies import load_policy_text
from policies.errors import PolicyError
from policies.residency import enumerate_paths

BASE = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries DE FR }
jurisdiction IN { countries IN }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
region eu-central { location 50.1 8.6; jurisdiction EU; endpoints 127.0.3.1; capacity 10rps }
region ap-south { location 19.0 72.8; jurisdiction IN; endpoints 127.0.4.1; capacity 10rps }
service chat.infer.example.com {
    steer latency geo
    all-down answer-nothing
%s
}
"""

EU_RULE = """
    residency eu {
        clients jurisdiction EU
        allow jurisdiction EU
        all-down %s
        %s
    }
"""


def rule(all_down: str = "answer-allowed", extra: str = "") -> str:
    return EU_RULE % (all_down, extra)


SPILL = "spillover { at 85%%; max 30%%%s }"
REFUSE = "unknown-location refuse"

# id -> (service body, the path that leaks, or None when every path stays in the EU)
CASES: dict[str, tuple[str, str | None]] = {
    "primary-only": (rule() + REFUSE, None),
    "spillover-default-targets-stay-inside": (rule() + SPILL % "" + "\n" + REFUSE, None),
    "spillover-to-us-east-leaks": (
        rule() + SPILL % "; to eu-central us-east" + "\n" + REFUSE,
        "spillover eu-west -> us-east"),
    "spillover-to-inside-is-fine": (rule() + SPILL % "; to eu-central eu-west" + "\n" + REFUSE,
                                    None),
    "rule-spillover-to-none-overrides-leaky-to": (
        rule(extra="spillover-to none") + SPILL % "; to us-east" + "\n" + REFUSE, None),
    "rule-spillover-to-us-east-leaks": (
        rule(extra="spillover-to us-east") + SPILL % "" + "\n" + REFUSE,
        "spillover eu-west -> us-east"),
    "rule-spillover-to-without-spillover-block-is-inert": (
        rule(extra="spillover-to us-east") + REFUSE, None),
    "all-down-answer-nothing": (rule("answer-nothing") + REFUSE, None),
    "all-down-fallback-inside": (rule("fallback eu-central") + REFUSE, None),
    "all-down-fallback-us-east-leaks": (rule("fallback us-east") + REFUSE,
                                        "all allowed regions down"),
    "all-down-fallback-any-leaks": (rule("fallback any") + REFUSE, "all allowed regions down"),
    "unknown-location-inside": (rule() + "unknown-location regions eu-west", None),
    "unknown-location-us-east-leaks": (rule() + "unknown-location regions eu-west us-east",
                                       "unknown client location"),
    "unknown-location-any-leaks": (rule() + "unknown-location any", "unknown client location"),
    "unknown-location-default-leaks": (rule(), "unknown client location"),
    "no-ecs-unknown-leaks-with-unknown": (
        rule() + "unknown-location any\nno-ecs unknown", "no ECS (treated as unknown location)"),
    "no-ecs-unknown-with-refuse": (rule() + REFUSE + "\nno-ecs unknown", None),
    "no-ecs-resolver": (rule() + REFUSE + "\nno-ecs resolver", None),
    "served-regions-limit-the-candidates": (
        "regions us-east eu-west\n" + rule() + SPILL % "" + "\n" + REFUSE, None),
}


def _policy(body: str):
    return load_policy_text(BASE % body, prove=False)


@pytest.mark.parametrize(("body", "leak"), CASES.values(), ids=CASES.keys())
def test_path(body: str, leak: str | None) -> None:
    paths = {check.path: check for check in enumerate_paths(_policy(body))}
    leaking = {name for name, check in paths.items() if check.leaks}
    if leak is None:
        assert not leaking
        load_policy_text(BASE % body)  # and the proof in load agrees
    else:
        assert leak in leaking
        with pytest.raises(PolicyError) as caught:
            load_policy_text(BASE % body)
        assert f"'{leak}'" in caught.value.render()


def test_every_path_kind_is_enumerated() -> None:
    body = rule() + SPILL % "" + "\n" + REFUSE + "\nno-ecs unknown"
    paths = [check.path for check in enumerate_paths(_policy(body))]
    assert paths == [
        "primary",
        "failover in steering order",
        "spillover eu-west -> eu-central",
        "spillover eu-central -> eu-west",
        "all allowed regions down",
        "unknown client location",
        "no ECS (treated as unknown location)",
        "client located as DE",  # one class: every place of the rule's clients goes alike
    ]


def test_unknown_location_must_suit_every_rule() -> None:
    india = """
    residency india {
        clients jurisdiction IN
        allow ap-south
        all-down answer-nothing
    }
    """
    body = rule() + india + "unknown-location regions eu-west"
    leaking = {(c.rule, c.path) for c in enumerate_paths(_policy(body)) if c.leaks}
    assert leaking == {("india", "unknown client location")}
    assert not [c for c in enumerate_paths(_policy(rule() + india + REFUSE)) if c.leaks]


def test_answers_and_allowed_are_reported() -> None:
    body = rule("fallback us-east") + REFUSE
    check = next(c for c in enumerate_paths(_policy(body)) if c.path.startswith("all allowed"))
    assert check.answers == ("us-east",)
    assert check.allowed == ("eu-west", "eu-central")
    assert check.leaks == ("us-east",)
    assert check.as_dict()["ok"] is False


def test_rule_allowing_no_served_region_is_rejected() -> None:
    body = "regions us-east\n" + rule("answer-nothing") + REFUSE
    with pytest.raises(PolicyError, match="no region that serves the service is allowed"):
        load_policy_text(BASE % body)


def test_service_all_down_is_for_clients_no_rule_covers() -> None:
    # The service's own all-down answers clients outside every rule, so a fallback to
    # us-east there does not leak EU clients (their rule's all-down applies to them).
    text = (BASE % (rule() + REFUSE)).replace("all-down answer-nothing\n",
                                              "all-down fallback us-east\n", 1)
    policy = load_policy_text(text)
    assert policy.services[0].all_down.regions == ("us-east",)


def exact_match(policy, service, where):
    """A matcher that holds a client only by its own country or continent: a continent-only
    client of a countries-only rule comes out located and under no rule."""
    from policies.matching import Coverage, coverage, rule_clients

    if not where.known:
        return coverage(policy, service, where)
    rules = tuple(r for r in service.residency
                  if where.countries & rule_clients(policy, r).countries
                  or where.continents & rule_clients(policy, r).continents)
    return Coverage(rules, (), True, None) if not rules else coverage(policy, service, where)


def test_the_proof_checks_matching_not_takes_it_as_given(monkeypatch) -> None:
    """Every shape of location a rule's clients may have is a path: with a matcher that lets
    continent-only clients escape, the proof fails at the rule, naming the class."""
    body = rule() + REFUSE
    assert not [c for c in enumerate_paths(_policy(body)) if c.leaks]
    assert any(c.path.startswith("client located as") for c in enumerate_paths(_policy(body)))
    monkeypatch.setattr("policies.residency.coverage", exact_match)
    leaking = [c for c in enumerate_paths(_policy(body)) if c.leaks]
    assert [c.path for c in leaking] == ["client located as EU (continent only)"]
    assert leaking[0].leaks == ("us-east", "ap-south")
    with pytest.raises(PolicyError) as caught:
        load_policy_text(BASE % body)
    assert "'client located as EU (continent only)'" in caught.value.render()
