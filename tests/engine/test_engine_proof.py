"""The engine-run half of the residency proof: it passes the examples and a 50-region policy
with every region included, and it catches engines that leak in one kind of state only."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest

from benchkit.policy_gen import generate
from director.engine import Engine
from director.engine.engine_proof import run_engine_proof
from policies import load_policy_text
from policies.matching import Coverage, coverage, rule_clients

LEAKY = """
zone infer.example.com { ns ns1.infer.example.com 127.0.0.1 }
jurisdiction EU { countries FR DE }
region us-east { location 38.9 -77.0; jurisdiction US; endpoints 127.0.1.1; capacity 10rps }
region eu-west { location 53.3 -6.2; jurisdiction EU; endpoints 127.0.2.1; capacity 10rps }
service chat.infer.example.com {
    spillover { at 80%; max 50%; to us-east }
    residency eu { clients jurisdiction EU; allow eu-west; all-down fallback any }
    unknown-location any
    all-down answer-allowed
}
"""


def test_example_policy_passes_exhaustively(example_policy) -> None:
    proof = run_engine_proof(example_policy)
    assert proof.ok and proof.violations == ()
    assert [s.service for s in proof.services] == [s.name for s in example_policy.services]
    assert all(s.exhaustive and s.missing == () for s in proof.services)
    assert proof.decisions > 5000
    assert "3 of 3 services exhaustively" in proof.summary()


def test_engine_enforces_residency_even_for_a_policy_loaded_without_the_proof() -> None:
    proof = run_engine_proof(load_policy_text(LEAKY, prove=False))
    assert proof.decisions > 0 and proof.violations == ()


@pytest.fixture(scope="module")
def wide_policy():
    return load_policy_text(generate(regions=50, gpus=1, services=3))


def test_a_50_region_policy_runs_on_the_border_states_with_every_region(wide_policy) -> None:
    proof = run_engine_proof(wide_policy)
    assert proof.ok
    for service in proof.services:
        assert service.regions == 50 and service.missing == () and not service.exhaustive
        assert service.placements >= 100  # EU and IN clients placed at every region
    assert "every region included" in proof.summary()


# Engines that cross a border in one kind of state only: the proof must find each.
def _forbidden(engine: Engine, decision) -> tuple[str, ...]:
    service = engine.policy.service(decision.service)
    allowed = set(decision.allowed or ())
    return tuple(r for r in service.regions if r not in allowed)[:1]


class LeaksOnSpill(Engine):
    def decide(self, service, client, snapshot, *, explain=True):
        decision = super().decide(service, client, snapshot, explain=explain)
        if decision.reason == "spillover" and decision.allowed is not None:
            return dataclasses.replace(decision, regions=_forbidden(self, decision))
        return decision


class LeaksWhenAllAllowedAreDown(Engine):
    def decide(self, service, client, snapshot, *, explain=True):
        decision = super().decide(service, client, snapshot, explain=explain)
        if decision.reason == "all-down" and decision.allowed is not None:
            return dataclasses.replace(decision, regions=_forbidden(self, decision))
        return decision


class LeaksForUnlocatedClients(Engine):
    def decide(self, service, client, snapshot, *, explain=True):
        decision = super().decide(service, client, snapshot, explain=explain)
        if client.location is None:
            regions = self.policy.service(decision.service).regions
            return dataclasses.replace(decision, regions=regions[-1:])
        return decision


class LeaksWhenOnlyAForbiddenRegionIsUp(Engine):
    def decide(self, service, client, snapshot, *, explain=True):
        decision = super().decide(service, client, snapshot, explain=explain)
        up = [r for r, state in snapshot.regions.items() if state.healthy]
        if len(up) == 1 and decision.allowed is not None and up[0] not in decision.allowed:
            return dataclasses.replace(decision, regions=tuple(up))
        return decision


class ForgetsOneCountry(Engine):
    """Misclassifies German clients as American: covered by no rule (so they go anywhere).
    (A code nobody knows, such as ZZ, would place them nowhere: the unknown-location path,
    which cannot leak.)"""

    def decide(self, service, client, snapshot, *, explain=True):
        location = client.location
        if location is not None and location.country == "DE":
            client = dataclasses.replace(client, location=dataclasses.replace(
                location, country="US", continent="NA"))
        return super().decide(service, client, snapshot, explain=explain)


def exact_match_coverage(policy, service, where):
    """The matcher as it was before continent-only locations were handled: a rule holds a
    client only when it lists the client's country or the continent GeoIP gives, so a
    continent-only client of countries-only rules is located under no rule."""
    if not where.known:
        return coverage(policy, service, where)
    rules = tuple(rule for rule in service.residency
                  if where.countries & rule_clients(policy, rule).countries
                  or where.continents & rule_clients(policy, rule).continents)
    if not rules:
        return Coverage((), (), True, None)
    allowed = set(service.regions)
    for rule in rules:
        allowed &= set(rule.allowed)
    return Coverage(rules, (), True, tuple(r for r in service.regions if r in allowed))


class MatchesExactly(Engine):
    """Decides with ``exact_match_coverage``: continent-only clients escape country rules."""

    def decide(self, service, client, snapshot, *, explain=True):
        with mock.patch("director.engine.context.coverage", exact_match_coverage):
            return super().decide(service, client, snapshot, explain=explain)


@pytest.mark.parametrize("mutant", [LeaksOnSpill, LeaksWhenAllAllowedAreDown,
                                    LeaksForUnlocatedClients, LeaksWhenOnlyAForbiddenRegionIsUp,
                                    ForgetsOneCountry, MatchesExactly],
                         ids=["spill", "all-down", "unlocated", "only-forbidden-up",
                              "misclassified", "continent-only-escapes"])
@pytest.mark.parametrize("policy_kind", ["example", "wide"])
def test_the_proof_catches_an_engine_that_leaks(mutant, policy_kind, example_policy,
                                                wide_policy) -> None:
    policy = example_policy if policy_kind == "example" else wide_policy
    proof = run_engine_proof(policy, engine=mutant(policy))
    assert proof.violations, f"{mutant.__name__} went unnoticed"
    assert not proof.ok
