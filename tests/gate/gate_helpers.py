"""Stand-ins for the engine-run half of the residency proof: one that always finds a leak,
so tests can show that a path runs it, and a spy that records which proofs ran."""

from __future__ import annotations

import pytest

from director import policy_gate
from director.engine.engine_proof import EngineProof, ServiceCoverage, Violation
from policies import Policy


def engine_proof_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The services of every engine proof the gate runs from now on, one tuple per run. The
    spy is a new function, so the gate's memo of proofs (keyed by it) starts empty."""
    runs: list[tuple[str, ...]] = []
    real = policy_gate.run_engine_proof

    def counted(policy: Policy, **kwargs: object) -> EngineProof:
        runs.append(tuple(service.name for service in policy.services))
        return real(policy)

    monkeypatch.setattr(policy_gate, "run_engine_proof", counted)
    return runs


def leaking_engine_proof(policy: Policy, **_: object) -> EngineProof:
    service = next(s for s in policy.services if s.residency)
    violation = Violation(service.name, service.residency[0].name, "FR@us-east#0", (), (),
                          ("us-east",), service.residency[0].allowed)
    coverage = ServiceCoverage(service.name, len(service.regions), 1, 1, 1, False, ())
    return EngineProof((violation,), (coverage,), 0.0)
