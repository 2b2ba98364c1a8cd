# SPDX-License-Identifier: Apache-2.0
"""Faults as admin API calls: resolve targets, inject with a dead-man ttl, restore.

Each fault type becomes calls with their undo:

=================  ==============================================  =========================
type               inject                                          restore
=================  ==============================================  =========================
region.kill        POST /api/v1/chaos/processes kill               restore (same names)
                   ``balancer/<r>`` and ``gpu/<r>/*``
region.freeze      ... freeze ``balancer/<r>`` (SIGSTOP)           restore (SIGCONT)
region.drain       POST /api/v1/regions/<r>/drain                  .../undrain
gpu.errors|slow|   POST /api/v1/chaos/gpus/<r>/<g>/fault           the same with mode none
hang|fail|short|   (the simulator's fault switch)
stall|late
gpu.swap           POST /api/v1/chaos/gpus/<r>/<g>/root            the same, restore: true
                   (a silent revision swap: another root)
rollout.start      POST /api/v1/rollouts, id ``drill-<fault id>``  DELETE /api/v1/rollouts/
                                                                   <id>?abort=true
gpu.kill           chaos/processes kill ``gpu/<r>/<g>``            restore
gpu.drain          POST /api/v1/regions/<r>/gpus/<g>/drain         .../undrain
redis.down         chaos/processes kill|freeze ``valkey``          restore
workers.kill       chaos/processes kill ``workers``                restore
process.kill|      chaos/processes kill|freeze ``names``           restore
freeze
=================  ==============================================  =========================

Every inject call carries ``ttl`` = the fault's duration plus ``blast_radius.ttl_margin``
(capped by ``blast_radius.max_duration``), so the system undoes the fault by itself if the
runner dies. Restores run however the drill ends (see ``runner``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from drills.admin import AdminClient
from drills.errors import AdminApiError, InjectionError, TargetError
from drills.model import BlastRadius, Fault, FaultType, RestoreStep, Target
from drills.records import FaultRecord
from drills.topology import Topology, regions_matching

PROCESSES = "/api/v1/chaos/processes"
_GPU_MODES = {FaultType.GPU_ERRORS: "error5xx", FaultType.GPU_SLOW: "slow",
              FaultType.GPU_HANG: "hang", FaultType.GPU_FAIL: "fail",
              FaultType.GPU_SHORT: "short", FaultType.GPU_STALL: "stall",
              FaultType.GPU_LATE: "late"}
ROLLOUTS = "/api/v1/rollouts"


def rollout_id(fault_id: str) -> str:
    """The id of the rollout a ``rollout.start`` fault starts (its checks follow it)."""
    return f"drill-{fault_id}"


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any = None


@dataclass(frozen=True)
class Operation:
    inject: Call
    restore: Call


@dataclass(frozen=True)
class Resolved:
    regions: tuple[str, ...] = ()
    gpus: tuple[tuple[str, str], ...] = ()     # (region, gpu)
    skipped: bool = False                      # empty target with on_empty: skip


@dataclass
class Plan:
    fault: Fault
    resolved: Resolved
    operations: list[Operation] = field(default_factory=list)
    processes: tuple[str, ...] = ()


def _select(items: list[Any], mode: str, rng: random.Random) -> list[Any]:
    if mode == "all" or not items:
        return items
    kind, _, number = mode.partition(":")
    n = int(number)
    count = min(len(items), n) if kind == "count" else max(1, round(len(items) * n / 100))
    return sorted(rng.sample(items, count))


def resolve_target(target: Target, topology: Topology, blast: BlastRadius,
                   rng: random.Random) -> Resolved:
    """Regions (or GPUs) a target selects in the running system; checks the blast radius."""
    regions = regions_matching(topology, target.regions, target.jurisdictions)
    if target.kind == "region":
        chosen = _select(regions, target.mode, rng)
        resolved = Resolved(regions=tuple(chosen))
    else:
        gpus = [(r, g.name) for r in regions for g in topology.region(r).gpus
                if not target.gpus or any(fnmatchcase(g.name, p) for p in target.gpus)]
        chosen_gpus = _select(gpus, target.mode, rng)
        resolved = Resolved(regions=tuple(dict.fromkeys(r for r, _ in chosen_gpus)),
                            gpus=tuple(chosen_gpus))
    if not resolved.regions:
        if target.on_empty == "skip":
            return Resolved(skipped=True)
        raise TargetError(f"target '{target.name}' selects nothing in the running system "
                          f"(regions: {', '.join(topology.names)})")
    outside = [r for r in resolved.regions if blast.regions and r not in blast.regions]
    if outside:
        raise TargetError(f"target '{target.name}' reaches {', '.join(outside)}, outside "
                          f"the blast radius ({', '.join(blast.regions)})")
    return resolved


def _processes(action: str, names: list[str], ttl: float) -> Operation:
    return Operation(Call("POST", PROCESSES, {"action": action, "names": names, "ttl": ttl}),
                     Call("POST", PROCESSES, {"action": "restore", "names": names}))


def plan_fault(fault: Fault, resolved: Resolved, ttl: float) -> Plan:
    """The calls that inject ``fault`` on its resolved target, each with its undo."""
    plan = Plan(fault, resolved)
    t, p = fault.type, fault.params
    names: list[str] = []
    if resolved.skipped or t.load_shape:
        return plan
    if t in (FaultType.REGION_KILL, FaultType.REGION_FREEZE):
        include = p.get("include") or ["balancer"]
        for r in resolved.regions:
            if "balancer" in include:
                names.append(f"balancer/{r}")
            if "gpus" in include:
                names.append(f"gpu/{r}/*")
        action = "kill" if t is FaultType.REGION_KILL else "freeze"
        plan.operations.append(_processes(action, names, ttl))
    elif t is FaultType.REGION_DRAIN:
        for r in resolved.regions:
            plan.operations.append(Operation(
                Call("POST", f"/api/v1/regions/{r}/drain", {"ttl": ttl}),
                Call("POST", f"/api/v1/regions/{r}/undrain", {})))
    elif t in _GPU_MODES:
        body: dict[str, Any] = {"mode": _GPU_MODES[t], "ttl": ttl}
        if t is FaultType.GPU_SLOW:
            body["factor"] = p.get("factor", 3.0)
        if t is FaultType.GPU_SHORT:
            body["factor"] = p.get("factor", 0.3)
        if t is FaultType.GPU_LATE:
            body["factor"] = p.get("factor", 5.0)
        if t in (FaultType.GPU_STALL, FaultType.GPU_LATE):
            body["rate"] = p.get("rate", 1.0)
        if t is FaultType.GPU_ERRORS:
            body["rate"] = p.get("rate", 1.0)
            if p.get("status") is not None:
                body["status"] = p["status"]
        for r, g in resolved.gpus:
            path = f"/api/v1/chaos/gpus/{r}/{g}/fault"
            plan.operations.append(Operation(Call("POST", path, body),
                                             Call("POST", path, {"mode": "none"})))
    elif t is FaultType.GPU_SWAP:
        for r, g in resolved.gpus:
            path = f"/api/v1/chaos/gpus/{r}/{g}/root"
            plan.operations.append(Operation(
                Call("POST", path, {"model": p["model"], "root": p["root"], "ttl": ttl}),
                Call("POST", path, {"model": p["model"], "restore": True})))
    elif t is FaultType.ROLLOUT_START:
        ident = rollout_id(fault.id)
        body = {"id": ident, "model": p["model"], "baseline": p["baseline"],
                "candidate": p["candidate"], "steps": list(p.get("steps") or ()),
                "interval_s": p.get("interval", 60.0)}
        if p.get("regions"):
            body["regions"] = list(p["regions"])
        if p.get("gates"):
            body["gates"] = [{"name": name, "threshold": threshold,
                              **({"min_samples": p["min_samples"]} if p.get("min_samples")
                                 else {})} for name, threshold in p["gates"].items()]
        plan.operations.append(Operation(Call("POST", ROLLOUTS, body),
                                         Call("DELETE", f"{ROLLOUTS}/{ident}?abort=true")))
    elif t is FaultType.GPU_KILL:
        names = [f"gpu/{r}/{g}" for r, g in resolved.gpus]
        plan.operations.append(_processes("kill", names, ttl))
    elif t is FaultType.GPU_DRAIN:
        for r, g in resolved.gpus:
            base = f"/api/v1/regions/{r}/gpus/{g}"
            plan.operations.append(Operation(Call("POST", f"{base}/drain", {"ttl": ttl}),
                                             Call("POST", f"{base}/undrain", {})))
    elif t is FaultType.REDIS_DOWN:
        names = [p.get("process", "valkey")]
        plan.operations.append(_processes(p.get("mode", "kill"), names, ttl))
    elif t is FaultType.WORKERS_KILL:
        names = [p.get("process", "workers")]
        plan.operations.append(_processes("kill", names, ttl))
    elif t in (FaultType.PROCESS_KILL, FaultType.PROCESS_FREEZE):
        names = list(p.get("names") or ())
        action = "kill" if t is FaultType.PROCESS_KILL else "freeze"
        plan.operations.append(_processes(action, names, ttl))
    plan.processes = tuple(names)
    return plan


class Injector:
    """Injects planned faults and keeps the ledger of what must be undone."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.ledger: list[tuple[FaultRecord, Operation]] = []   # injected, not yet restored

    async def inject(self, plan: Plan, record: FaultRecord) -> None:
        """Run the plan's inject calls; on a failure raise ``InjectionError``.

        Each operation enters the ledger *before* its call is sent: a call cut short (the
        drill interrupted while it was in flight) may have been applied, so its undo must
        run. Only an answer that says nothing was done (a 4xx, or nothing affected) takes
        it out again."""
        record.regions = plan.resolved.regions
        record.gpus = tuple(f"{r}/{g}" for r, g in plan.resolved.gpus)
        record.processes = plan.processes
        for op in plan.operations:
            entry = (record, op)
            self.ledger.append(entry)
            try:
                answer = await self.admin.request(op.inject.method, op.inject.path,
                                                  op.inject.body, journal=record.calls)
            except AdminApiError as exc:
                record.error = str(exc)
                if exc.status is not None and 400 <= exc.status < 500:
                    self.ledger.remove(entry)
                raise InjectionError(f"fault '{record.id}': {exc}", exc.status) from exc
            if isinstance(answer, dict) and answer.get("affected") == []:
                self.ledger.remove(entry)
                record.error = "the fault affected nothing"
                raise InjectionError(f"fault '{record.id}': {op.inject.path} affected nothing")

    async def restore(self, fault_id: str | None = None) -> list[str]:
        """Undo injected operations (of one fault, or all, newest first); every undo is
        tried even when one fails. Returns the errors."""
        errors = []
        # each entry leaves the ledger before its undo is sent: two faults ending at once
        # restore concurrently, and neither may undo (or bring back) the other's entries
        for entry in [e for e in reversed(self.ledger)
                      if fault_id is None or e[0].id == fault_id]:
            if entry not in self.ledger:
                continue
            self.ledger.remove(entry)
            record, op = entry
            try:
                await self.admin.request(op.restore.method, op.restore.path, op.restore.body,
                                         journal=record.calls)
            except AdminApiError as exc:
                message = f"restore of fault '{record.id}' failed: {exc} (its dead-man ttl " \
                          f"of {record.ttl:g}s undoes it)"
                record.restore_error = message
                errors.append(message)
        return errors


def restore_step_calls(step: RestoreStep, resolved: Resolved) -> list[Call]:
    """The calls of one explicit restore step."""
    if step.type == "process.restore":
        return [Call("POST", PROCESSES, {"action": "restore", "names": list(step.names)})]
    if step.type == "region.undrain":
        return [Call("POST", f"/api/v1/regions/{r}/undrain", {}) for r in resolved.regions]
    if step.type == "gpu.undrain":
        return [Call("POST", f"/api/v1/regions/{r}/gpus/{g}/undrain", {})
                for r, g in resolved.gpus]
    return [Call("POST", f"/api/v1/chaos/gpus/{r}/{g}/fault", {"mode": "none"})
            for r, g in resolved.gpus]
