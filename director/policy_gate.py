"""The one gate every policy passes before anything uses it.

``accept`` parses, compiles, validates, proves residency from the policy
(``policies.residency``), runs the decision engine over the border states
(``director.engine.engine_proof``) and lints (``policies.lint``). A policy that fails either
half of the residency proof is refused; lint warnings never refuse one, unless ``strict``.

Every path that loads a policy goes through here: ``director policy check`` and ``explain``,
``PUT /api/v1/policy`` and the admin API's follower, ``dns serve`` (its file, its reloads,
the stored-policy follower), ``director up``, ``region serve`` and its follower, the probe
workers and the demo. ``tests/test_policy_gate.py`` checks that no other path loads one.

Checking is bounded (``policies.limits`` caps the policy's size) and, given ``deadline_s``,
has a deadline: the parse, each included file, each block, each stage and each service's
engine proof start only before it, so a policy whose check would run longer is refused
with an error saying what was under way, at most one service's proof past the deadline
(the admin API gives ``PUT /api/v1/policy`` one, ``director api serve --policy-deadline``).

A policy stored in Redis carries the digests of the engine proofs its writer ran
(``Acceptance.proofs``, ``director.proof_digest``): a follower running the same code adopts
those services without running their decisions again, and runs any other itself. The
digests are trusted as the policy text beside them is: whoever can write one can write the
other. The policy half of the proof always runs.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from director.engine.engine_proof import EngineProof, ServiceCoverage, run_engine_proof
from director.proof_digest import proof_digest
from policies import CheckResult, Diagnostic, Policy, PolicyError, check_policy
from policies.deadline import Deadline
from policies.errors import DeadlineExceeded
from policies.loader import (
    PolicySources,
    SourceReader,
    memory_reader,
    proof_disabled,
    read_file,
    sources_of,
)
from policies.model import Capacity, Failover, Service, Soa, Zone
from state.policy_identity import PolicyIdentity, policy_digest
from state.records import PolicyRecord

MAX_REPORTED_VIOLATIONS = 20
PROOFS_KEPT = 64  # service proofs
_PROOFS: dict[tuple, EngineProof] = {}
_PROOFS_LOCK = threading.Lock()
_ZONE = Zone("", 0.0, Soa("", "", None, 0.0, 0.0, 0.0, 0.0), (), ())  # in every proof key
_CAPACITY = Capacity(0.0)
_FAILOVER = Failover(0, 0, 0.0, 0.0)  # probe hysteresis: read by probes, not decisions


@dataclass(frozen=True)
class Acceptance:
    """What the gate found; ``policy`` is set only when the policy is accepted."""

    path: str
    result: CheckResult
    engine: EngineProof | None  # None when the policy did not compile or prove
    strict: bool = False
    late: Diagnostic | None = None  # the engine proof ran past the deadline


    @property
    def warnings(self) -> list[Diagnostic]:
        return self.result.warnings

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every problem that refuses the policy (warnings too, when strict)."""
        found = list(self.result.diagnostics)
        if self.late is not None:
            found.append(self.late)
        if self.engine is not None:
            found += _engine_diagnostics(self.result.policy, self.engine)
        if self.strict:
            found += self.result.warnings
        return found

    @property
    def ok(self) -> bool:
        return self.result.policy is not None and not self.diagnostics

    @property
    def policy(self) -> Policy | None:
        return self.result.policy if self.ok else None

    def error(self) -> PolicyError:
        return PolicyError(self.diagnostics, self.result.sources)

    @property
    def proofs(self) -> tuple[str, ...]:
        """Digests of the engine proofs that hold, to store with the policy (empty unless
        accepted after running them)."""
        policy = self.policy
        if policy is None or self.engine is None:
            return ()
        return tuple(proof_digest(proof_class(service_proof_key(policy, service)))
                     for service in policy.services if service.residency)

    def sources(self) -> PolicySources:
        """The texts that were accepted: the main file and its includes."""
        return sources_of(self.path, self.result)

    def identity(self) -> PolicyIdentity:
        """The accepted file as a policy never stored (version None) with its digest, the
        same as its stored record's (``state.policy_identity``)."""
        sources = self.sources()
        return PolicyIdentity(None, policy_digest(sources.name, sources.text, sources.files))


def accept(path: str, *, reader: SourceReader = read_file, strict: bool = False,
           proven: Collection[str] = (), deadline_s: float | None = None) -> Acceptance:
    """Check the policy at ``path`` (and what it includes) through both proofs; engine
    proofs whose digest is in ``proven`` (a stored record's) are not run again. With
    ``deadline_s``, a check that runs longer refuses the policy."""
    deadline = Deadline(deadline_s) if deadline_s is not None else None
    result = check_policy(path, reader=reader, deadline=deadline)
    engine = None
    late = None
    if result.policy is not None and not proof_disabled():
        try:
            engine = engine_proof(result.policy, proven=frozenset(proven), deadline=deadline)
        except DeadlineExceeded as exc:
            late = Diagnostic(exc.pos or result.policy.pos, str(exc),
                              hint="the policy is too large or too intricate to prove in "
                                   "time; the running policy stays in force")
    return Acceptance(path, result, engine, strict, late)


def engine_proof(policy: Policy, *, proven: frozenset[str] = frozenset(),
                 deadline: Deadline | None = None) -> EngineProof:
    """``run_engine_proof(policy)``, one service at a time, each service's part remembered
    under ``proof_class(service_proof_key(...))``: an edit that no decision reads (TTLs,
    SOA, endpoints, GPU servers, health checks) or that only moves a spillover threshold is
    adopted in milliseconds, and another edit of one service runs the decisions of that
    service alone. A part whose digest is in ``proven`` is not run. Raises
    ``DeadlineExceeded`` when a service is reached past ``deadline``."""
    parts = []
    for service in policy.services:
        if service.residency:
            if deadline is not None:
                deadline.check(f"running the engine proof of service {service.name}",
                               service.pos)
            parts.append(_service_proof(service_proof_key(policy, service), proven))
    return EngineProof(tuple(v for part in parts for v in part.violations),
                       tuple(s for part in parts for s in part.services),
                       sum(part.seconds for part in parts))


def _service_proof(key: Policy, proven: frozenset[str]) -> EngineProof:
    attested = proof_class(key)
    memo_key = (run_engine_proof, attested)  # per proof implementation, too
    with _PROOFS_LOCK:
        proof = _PROOFS.get(memo_key)
    if proof is None and proven and proof_digest(attested) in proven:
        service = key.services[0]
        return EngineProof((), (ServiceCoverage(service.name, len(service.regions), 0, 0, 0,
                                                False, (), attested=True),), 0.0)
    if proof is None:
        proof = run_engine_proof(key)
        with _PROOFS_LOCK:
            if len(_PROOFS) >= PROOFS_KEPT:
                del _PROOFS[next(iter(_PROOFS))]
            _PROOFS[memo_key] = proof
    return proof


def proof_key(policy: Policy) -> Policy:
    """``policy`` without what the engine only copies into answers or never reads (the
    zone's SOA, name servers and TTL, the services' TTLs and failover hysteresis, the
    regions' endpoints, GPU servers and capacity, health checks; the tenants, which only
    the regional balancers read): equal keys, equal engine proofs."""
    return replace(
        policy, zone=_ZONE, healthchecks=(), tenants=(), identity=None,
        regions=tuple(replace(region, endpoints_v4=(), endpoints_v6=(), gpus=(),
                              capacity=_CAPACITY, healthcheck=None)
                      for region in policy.regions),
        services=tuple(replace(service, ttl=0.0, degraded_ttl=0.0, healthcheck=None,
                               failover=_FAILOVER)
                       for service in policy.services))


def service_proof_key(policy: Policy, service: Service) -> Policy:
    """``proof_key`` of ``policy`` cut to ``service`` and the regions it names: what the
    engine reads to decide for ``service``, so equal keys give equal proofs of it."""
    key = proof_key(replace(policy, services=(service,)))
    return replace(key, regions=tuple(r for r in key.regions if r.name in service.regions))


def proof_class(key: Policy) -> Policy:
    """A ``service_proof_key`` with its service's spillover threshold at 1: the key its
    engine proof is remembered and attested under. The proof loads regions at multiples of
    the threshold (``engine_proof``: hot 3x, cold 0.5x) and the engine reads the threshold
    only against a load (``spillover``: the share 1 - t/u, a target's load >= t), so keys
    that differ in the threshold alone run the same decisions
    (``tests/engine/test_proof_threshold.py``): moving a threshold needs no proof."""
    return replace(key, services=tuple(
        replace(service, spillover=replace(service.spillover, threshold=1.0))
        if service.spillover is not None else service for service in key.services))


def accept_text(text: str, name: str = "policy.dp", files: Mapping[str, str] | None = None,
                *, strict: bool = False, proven: Collection[str] = (),
                deadline_s: float | None = None) -> Acceptance:
    """Like ``accept``, from memory; ``files`` holds included files by path."""
    return accept(name, reader=memory_reader({name: text, **(files or {})}), strict=strict,
                  proven=proven, deadline_s=deadline_s)


def load(path: str, *, reader: SourceReader = read_file) -> Policy:
    """The accepted policy at ``path``; raises ``PolicyError`` listing every problem."""
    return _accepted(accept(path, reader=reader))


def load_text(text: str, name: str = "policy.dp",
              files: Mapping[str, str] | None = None) -> Policy:
    """The accepted policy from memory; raises ``PolicyError``."""
    return _accepted(accept_text(text, name, files))


def accept_record(record: PolicyRecord) -> Acceptance:
    """``accept`` on a stored record, trusting the engine proofs its writer recorded."""
    return accept_text(record.text, record.name, record.files, proven=record.proofs)


def load_record(record: PolicyRecord) -> Policy:
    """The accepted policy a stored record holds; raises ``PolicyError``."""
    return _accepted(accept_record(record))


def _accepted(acceptance: Acceptance) -> Policy:
    if acceptance.policy is None:
        raise acceptance.error()
    return acceptance.policy


def _engine_diagnostics(policy: Policy | None, proof: EngineProof) -> list[Diagnostic]:
    if policy is None:
        return []
    found = []
    for violation in proof.violations[:MAX_REPORTED_VIOLATIONS]:
        service = policy.service(violation.service)
        found.append(Diagnostic(
            service.pos, f"residency violated by the engine: {violation.describe()}",
            hint="the policy proof holds but the engine answered outside the allowed "
            "regions: this is a bug in director, please report it with this policy"))
    hidden = len(proof.violations) - MAX_REPORTED_VIOLATIONS
    if hidden > 0:
        found.append(Diagnostic(policy.pos, f"... and {hidden} more engine residency "
                                            "violations"))
    for coverage in proof.services:
        if coverage.missing:
            service = policy.service(coverage.service)
            found.append(Diagnostic(
                service.pos, f"the engine-run residency proof left {', '.join(coverage.missing)}"
                " unchecked", hint="this is a bug in director's proof, please report it"))
    return found
