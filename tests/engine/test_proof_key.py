"""What the policy gate's proof memo leaves out, no decision reads: for every policy and
service of the decision corpus, the engine run on ``service_proof_key`` (the policy cut to
the service and its regions, without TTLs, endpoints, GPU servers, capacity and health
checks) decides every case as the engine run on the whole policy does, TTL aside."""

from __future__ import annotations

import json

from decision_corpus import cases, engine, policies

from director.policy_gate import service_proof_key


def _without_ttl(decision: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in decision.items() if key != "ttl"}


def test_the_service_proof_key_keeps_everything_a_decision_reads() -> None:
    compared = 0
    for policy_name, policy in policies().items():
        whole = engine(policy_name, policy)
        for service in policy.services:
            cut = engine(policy_name, service_proof_key(policy, service))
            for name, _label, _snapshot, client, snapshot in cases(policy_name, policy):
                if name != service.name:
                    continue
                want = _without_ttl(whole.decide(name, client, snapshot).as_dict())
                got = _without_ttl(cut.decide(name, client, snapshot).as_dict())
                assert json.dumps(got) == json.dumps(want), (policy_name, name)
                compared += 1
    assert compared > 5000
