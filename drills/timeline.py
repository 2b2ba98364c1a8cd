# SPDX-License-Identifier: Apache-2.0
"""The drill's timeline, as planned: what the dry run prints and the report draws.

Entries are (time, what, detail) on the drill clock: phase starts with their offered
rate, fault starts and ends (with the dead-man ttl each inject call carries), when each
check is judged, the end of the load and the restore that always follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from drills.arrivals import expected_count, offered_rate
from drills.model import Drill, FaultType, When


@dataclass(frozen=True)
class Entry:
    t: float
    kind: str          # phase | fault | restore | check | load | guard
    what: str
    detail: str = ""


def _rate(drill: Drill, t: float, baseline: float | None) -> str:
    if baseline is None:
        return "trace rate"
    return f"{offered_rate(drill.load, drill.faults, baseline, t):.3g} rps"


def timeline(drill: Drill, baseline: float | None = None) -> list[Entry]:
    """Every planned event in time order; ``baseline`` is the rate of ``rps: 1x``."""
    load = drill.load
    if baseline is None and load.rate is not None:
        baseline = load.rate.rps
    out: list[Entry] = []
    t = 0.0
    for phase in load.phases:
        rate = f"{phase.rps:g} rps" if phase.rps is not None else f"{phase.multiplier:g}x"
        ramp = f", ramp {phase.ramp:g}s" if phase.ramp else ""
        out.append(Entry(t, "phase", f"phase {phase.name}",
                         f"{phase.duration:g}s at {rate}{ramp} "
                         f"({_rate(drill, t + phase.ramp, baseline)})"))
        t += phase.duration
    for f in drill.faults:
        if f.type is FaultType.TRAFFIC_SPIKE:
            out.append(Entry(f.start, "fault", f"{f.id}: traffic x{f.params['multiplier']:g}",
                             f"for {f.duration:g}s"))
            out.append(Entry(f.end, "fault", f"{f.id}: spike ends"))
            continue
        if f.type is FaultType.TENANT_FLOOD:
            p = f.params
            basis = f"{p['rate']:g} rps" if p.get("rate") is not None else "its request quota"
            out.append(Entry(f.start, "fault", f"{f.id}: tenant {p['tenant']} floods",
                             f"{p['multiplier']:g}x {basis}, for {f.duration:g}s"))
            out.append(Entry(f.end, "fault", f"{f.id}: flood ends"))
            continue
        target = f" on {f.target}" if f.target else ""
        params = ", ".join(f"{k}={'+'.join(map(str, v)) if isinstance(v, list) else v}"
                           for k, v in f.params.items())
        out.append(Entry(f.start, "fault", f"inject {f.id} ({f.type.value}{target})",
                         f"for {f.duration:g}s, dead-man ttl {drill.fault_ttl(f):g}s"
                         + (f"; {params}" if params else "")))
        out.append(Entry(f.end, "restore", f"restore {f.id}"))
    starts = [f.start for f in drill.faults] or [load.duration]
    ends = [f.end for f in drill.faults] or [load.duration]
    moments = {When.BEFORE: min(starts), When.DURING: max(ends), When.AFTER: load.duration,
               When.CONTINUOUS: load.duration}
    for c in drill.checks:
        note = "every tick and at the end" if c.when is When.CONTINUOUS else "judged"
        if c.aborts:
            note += "; the first violation stops the drill"
        out.append(Entry(moments[c.when], "check", f"check {c.name} ({c.type.value}, "
                         f"{c.when.value})", note))
    if drill.guards:
        out.append(Entry(0.0, "guard", f"{len(drill.guards)} guard(s) every "
                         f"{drill.guard_every:g}s", ", ".join(g.name for g in drill.guards)))
    out.append(Entry(load.duration, "load", "load ends",
                     f"in-flight requests get {drill.report.drain:g}s"))
    out.append(Entry(load.duration, "restore", f"restore ({drill.restore.strategy})",
                     "every fault still injected, then the restore steps; always runs"))
    order = {"phase": 0, "guard": 1, "check": 2, "fault": 3, "restore": 4, "load": 5}
    return sorted(out, key=lambda e: (e.t, order.get(e.kind, 9)))


def render(drill: Drill, baseline: float | None = None) -> str:
    """The dry run's text: header, cohorts, timeline."""
    load = drill.load
    lines = [f"drill {drill.name}: {drill.title}", f"  file: {drill.path}"]
    if drill.hypothesis:
        lines.append(f"  hypothesis: {drill.hypothesis}")
    source = f"rate {load.rate.rps:g} rps ({load.rate.arrivals})" if load.rate else \
        f"trace {load.trace.path} ({load.trace.format}, offset {load.trace.offset:g}s, " \
        f"speedup {load.trace.speedup:g}x)" if load.trace else "no load"
    rate = baseline if baseline is not None else (load.rate.rps if load.rate else None)
    count = f", about {expected_count(load, drill.faults, rate)} requests" if rate else ""
    lines.append(f"  load: service {load.service}, {source}, {load.duration:g}s{count}")
    for c in load.cohorts:
        where = ", ".join([*c.countries, *c.subnets])
        res = ""
        if c.residency:
            res = " residency: " + ", ".join([*c.residency.regions, *c.residency.jurisdictions])
        lines.append(f"  cohort {c.name}: {c.share:.0%} from {where}{res}")
    for t in load.tenants:
        lines.append(f"  tenant {t.name}: {t.share:.0%} of the load (an API key made for the "
                     "run, revoked after it)")
    lines.append("  timeline:")
    for e in timeline(drill, rate):
        lines.append(f"    {e.t:7.1f}s  {e.kind:<8} {e.what}" + (f"  ({e.detail})"
                                                               if e.detail else ""))
    return "\n".join(lines)
