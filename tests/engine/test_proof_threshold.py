"""A spillover threshold needs no engine proof of its own (``policy_gate.proof_class``).

The proof loads regions at multiples of the service's threshold, and the engine compares a
load only with the threshold, so a proof run under any threshold makes the same decisions.
Over every policy of the decision corpus with spillover (service and rule targets, several
answers, every steering method), the proof of each such service is run under thresholds
from 20% to 150%, recording every decision: the decisions, the violations and the coverage
must be the same under all of them.
"""

from __future__ import annotations

import random
from dataclasses import replace

from decision_corpus import policies

from director.engine import Engine
from director.engine.engine_proof import run_engine_proof
from director.policy_gate import proof_class, service_proof_key
from policies import Policy

THRESHOLDS = (0.2, 0.5, 0.85, 1.0, 1.5)


class RecordingEngine(Engine):
    """The engine, keeping what each decision was asked and answered."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy, rng=random.Random(0))  # services hashing nothing draw
        self.seen: list[tuple] = []

    def decide(self, service, client, snapshot, explain=True):  # type: ignore[override]
        decision = super().decide(service, client, snapshot, explain=explain)
        healthy = tuple(sorted(n for n, r in snapshot.regions.items() if r.healthy))
        self.seen.append((client.address, client.location, healthy, decision.regions,
                          decision.reason))
        return decision


def _with_threshold(key: Policy, threshold: float) -> Policy:
    service = key.services[0]
    assert service.spillover is not None
    return replace(key, services=(replace(
        service, spillover=replace(service.spillover, threshold=threshold)),))


def test_a_proof_decides_alike_under_every_threshold() -> None:
    compared = 0
    for policy in policies().values():
        for service in policy.services:
            if not service.residency or service.spillover is None:
                continue
            key = service_proof_key(policy, service)
            runs = []
            for threshold in THRESHOLDS:
                cut = _with_threshold(key, threshold)
                engine = RecordingEngine(cut)
                proof = run_engine_proof(cut, engine=engine)
                runs.append((engine.seen, proof.violations, proof.services))
                assert proof_class(cut) == proof_class(key)
            assert all(run == runs[0] for run in runs[1:]), service.name
            # spilling ran, except where no class can spill: in mixed.infer.example.com
            # every EU-continent client is under 'europe' (spillover-to none), and those of
            # jurisdiction EU under both rules too, which leave them eu-central alone
            spilled = any(seen[4] == "spillover" for seen in runs[0][0])
            assert spilled or service.name == "mixed.infer.example.com", service.name
            compared += len(runs[0][0])
    assert compared > 1000


def test_the_class_keeps_what_else_the_spillover_block_says() -> None:
    for policy in policies().values():
        for service in policy.services:
            if service.spillover is None:
                continue
            key = service_proof_key(policy, service)
            spill = key.services[0].spillover
            assert spill is not None
            other = replace(key, services=(replace(key.services[0], spillover=replace(
                spill, max_share=spill.max_share / 2)),))
            assert proof_class(other) != proof_class(key)
