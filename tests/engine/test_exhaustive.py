"""The engine-level residency check: the examples pass; the engine holds even unproved."""

from __future__ import annotations

from director.engine.exhaustive import check_engine_residency
from policies import load_policy_text

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


def test_example_policy_has_no_engine_violations(example_policy):
    violations, decisions = check_engine_residency(example_policy)
    assert violations == []
    assert decisions > 1000


def test_engine_enforces_residency_even_for_a_policy_loaded_without_the_proof():
    policy = load_policy_text(LEAKY, prove=False)
    violations, decisions = check_engine_residency(policy)
    assert decisions > 0
    assert violations == []
