"""A stand-in for the engine-run half of the residency proof that always finds a leak, so
tests can show that a path runs it."""

from __future__ import annotations

from director.engine.engine_proof import EngineProof, ServiceCoverage, Violation
from policies import Policy


def leaking_engine_proof(policy: Policy, **_: object) -> EngineProof:
    service = next(s for s in policy.services if s.residency)
    violation = Violation(service.name, service.residency[0].name, "FR@us-east#0", (), (),
                          ("us-east",), service.residency[0].allowed)
    coverage = ServiceCoverage(service.name, len(service.regions), 1, 1, 1, False, ())
    return EngineProof((violation,), (coverage,), 0.0)
