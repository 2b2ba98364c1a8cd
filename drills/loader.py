# SPDX-License-Identifier: Apache-2.0
"""Read a drill file into a ``Drill``: YAML with positions, schema, then meaning.

Every problem is reported at the line and column of the node it concerns (``yaml.compose``
keeps the marks), with the key path and, where one is close, a did-you-mean hint. Schema
problems (types, unknown keys) are all collected first; if there are none, the semantic
checks run (names that must exist, times that must fit, the blast radius) and are collected
the same way. Nothing here touches the network: targets and cohorts are resolved by the
runner against the running system.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode

from director.datasets import traces_dir
from drills.document import CHECK_EXPECT, DOCUMENT, FAULT_PARAMS
from drills.errors import Diagnostic, DrillFileError, did_you_mean
from drills.model import (
    BlastRadius,
    Check,
    CheckType,
    ClientSpec,
    Cohort,
    DnsSpec,
    Drill,
    Fault,
    FaultType,
    Guard,
    Load,
    Phase,
    RateSource,
    ReportSpec,
    RequestSpec,
    Residency,
    Restore,
    RestoreStep,
    Target,
    TenantShare,
    Tolerance,
    TraceSource,
    When,
)
from drills.schema import INVALID, MapOf, Reader, ScalarOnly, compose
from policies.model import SourcePos

MAX_BYTES = 1 << 20
TRACES_ENV = "DIRECTOR_TRACES"
Path_ = tuple[str | int, ...]


def load_drill(path: str | os.PathLike[str],
               variables: Mapping[str, str] | None = None) -> Drill:
    """Read and validate a drill file; raise ``DrillFileError`` with every problem."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except OSError as exc:
        raise DrillFileError([_whole(name, f"cannot read drill file: {exc.strerror}")]) from None
    if len(data) > MAX_BYTES:
        raise DrillFileError([_whole(name, f"drill file is {len(data)} bytes; "
                                           f"the limit is {MAX_BYTES}")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DrillFileError([_whole(name, f"drill file is not UTF-8: {exc.reason}")]) from None
    return load_drill_text(text, name, base_dir=str(Path(name).resolve().parent),
                           variables=variables)


def load_drill_text(text: str, file: str = "drill.yaml", *, base_dir: str | None = None,
                    variables: Mapping[str, str] | None = None) -> Drill:
    """Validate drill text; ``base_dir`` resolves relative trace paths."""
    root, diagnostics = compose(text, file)
    if diagnostics:
        raise DrillFileError(diagnostics, text)
    if root is None:
        raise DrillFileError([_whole(file, "empty drill file: expected a mapping with "
                                           "apiVersion, kind, metadata and load")], text)
    reader = Reader(file, _variables(root, file, variables, text))
    doc = DOCUMENT.read(root, (), reader)
    if reader.diagnostics or doc is INVALID:
        raise DrillFileError(reader.diagnostics, text)
    drill = _Builder(reader, base_dir or os.getcwd(), file).build(doc)
    if reader.diagnostics:
        raise DrillFileError(reader.diagnostics, text)
    return drill


def _whole(file: str, message: str) -> Diagnostic:
    return Diagnostic(SourcePos(file, 1, 1), message)


def _variables(root: Any, file: str, overrides: Mapping[str, str] | None,
               text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if isinstance(root, MappingNode):
        for key, node in root.value:
            if isinstance(key, ScalarNode) and key.value == "vars":
                reader = Reader(file)
                read = MapOf(ScalarOnly()).read(node, ("vars",), reader)
                if reader.diagnostics:
                    raise DrillFileError(reader.diagnostics, text)
                values.update(read if read is not INVALID else {})
    for key, raw in (overrides or {}).items():
        try:
            values[key] = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            values[key] = raw
    return values


_CHECK_FIELDS: dict[CheckType, set[str]] = {
    CheckType.LOST: {"exclude_in_flight_at_fault"},
    CheckType.TTFT: {"quantile", "compare_to"},
    CheckType.GOODPUT: {"compare_to"},
    CheckType.THROTTLED: {"min_admitted", "burst"},
    CheckType.FAILOVER_TIME: {"fault", "share", "window", "min_requests", "surviving"},
    CheckType.TRAFFIC_SHARE: {"regions", "backends"},
    CheckType.REGION_HEALTH: {"healthy", "unhealthy"},
    CheckType.ROLLOUT: {"fault", "status"},
}
_OPTIONAL_FIELDS = ("fault", "quantile", "share", "window", "min_requests", "surviving",
                    "regions", "backends", "healthy", "unhealthy", "exclude_in_flight_at_fault",
                    "compare_to", "min_admitted", "burst", "status")


class _Builder:
    """Turns the schema-checked document into the model, reporting semantic problems."""

    def __init__(self, reader: Reader, base_dir: str, file: str) -> None:
        self.r = reader
        self.base_dir = base_dir
        self.file = file

    def error(self, path: Path_, message: str, hint: str | None = None) -> None:
        self.r.error(path, message, hint)

    # -- document ------------------------------------------------------------------------

    def build(self, doc: dict[str, Any]) -> Drill:
        meta = doc["metadata"]
        blast = doc["blast_radius"]
        blast_radius = BlastRadius(tuple(blast["regions"] or ()), blast["max_duration"])
        load = self.load(doc["load"])
        targets = {name: self.target(spec, ("targets", name))
                   for name, spec in doc["targets"].items()}
        faults = self.faults(doc["method"], load, targets, blast_radius)
        checks = tuple(self.check(c, ("checks", i), load, faults)
                       for i, c in enumerate(doc["checks"]))
        self.unique([c.name for c in checks], "checks", "check name")
        guards_doc = doc["guards"]
        guards = tuple(self.guard(g, ("guards", "stop_when", i), load, checks)
                       for i, g in enumerate(guards_doc["stop_when"]))
        restore = self.restore(doc["restore"], targets)
        report = ReportSpec(tuple(dict.fromkeys(["json", *doc["report"]["formats"]])),
                            doc["report"]["drain"])
        return Drill(
            name=meta["name"], path=self.file, load=load, title=meta["title"] or meta["name"],
            hypothesis=" ".join((doc["hypothesis"] or "").split()),
            tags=tuple(meta["tags"]), targets=targets, faults=faults, checks=checks,
            guards=guards, guard_every=guards_doc["evaluate_every"], restore=restore,
            blast_radius=blast_radius, report=report, ttl_margin=blast["ttl_margin"],
        )

    def unique(self, names: list[str], path_head: str, what: str) -> None:
        seen: set[str] = set()
        for i, name in enumerate(names):
            if name in seen:
                self.error((path_head, i), f"duplicate {what} '{name}'")
            seen.add(name)

    # -- load ----------------------------------------------------------------------------

    def load(self, doc: dict[str, Any]) -> Load:
        path: Path_ = ("load",)
        rq = doc["request"]
        request = RequestSpec(rq["model"], rq["route"], rq["max_tokens"], rq["prompt_tokens"],
                              rq["max_prompt_tokens"])
        rate = RateSource(doc["rate"]["rps"], doc["rate"]["arrivals"]) if doc["rate"] else None
        trace = self.trace(doc["trace"]) if doc["trace"] else None
        if (rate is None) == (trace is None):
            self.error(path, "give exactly one of 'rate' (requests per second) or 'trace' "
                             "(a recorded trace to replay)")
        phases = tuple(Phase(p["name"], p["duration"],
                             p["rps"][1] if p["rps"][0] == "x" else 1.0,
                             p["rps"][1] if p["rps"][0] == "rps" else None, p["ramp"])
                       for p in doc["phases"])
        self.unique([p.name for p in phases], "load.phases", "phase name")
        for i, p in enumerate(phases):
            if p.ramp > p.duration:
                self.error((*path, "phases", i, "ramp"),
                           f"the ramp ({p.ramp:g}s) is longer than the phase ({p.duration:g}s)")
        cohorts = tuple(self.cohort(c, (*path, "cohorts", i))
                        for i, c in enumerate(doc["cohorts"]))
        names = [c.name for c in cohorts]
        for i, name in enumerate(names):
            if name in names[:i]:
                self.error((*path, "cohorts", i, "name"), f"duplicate cohort name '{name}'")
        total = sum(c.share for c in cohorts)
        if abs(total - 1.0) > 0.001:
            self.error((*path, "cohorts"), f"cohort shares add up to {total:g}, not 1")
        tenants = tuple(TenantShare(t["name"], t["share"]) for t in doc["tenants"] or ())
        self.unique([t.name for t in tenants], "load.tenants", "tenant")
        if tenants and abs(sum(t.share for t in tenants) - 1.0) > 0.001:
            self.error((*path, "tenants"), f"tenant shares add up to "
                       f"{sum(t.share for t in tenants):g}, not 1")
        cl, dn = doc["client"], doc["dns"]
        client = ClientSpec(cl["connect_timeout"], cl["first_byte_timeout"],
                            cl["stall_timeout"], cl["total_timeout"], cl["retries"],
                            cl["backoff"], cl["max_backoff"], cl["max_retry_after"],
                            cl["max_in_flight"])
        dns = DnsSpec(dn["ecs"], dn["timeout"], dn["cache"], dn["max_ttl"])
        geoip = self.resolve_file(doc["geoip"], (*path, "geoip")) if doc["geoip"] else None
        return Load(doc["service"], request, cohorts, phases, rate, trace, client, dns, geoip,
                    doc["seed"], doc["max_requests"], tenants)

    def resolve_file(self, name: str, path: Path_, search_env: str | None = None) -> str:
        candidates = [Path(name).expanduser()]
        if not candidates[0].is_absolute():
            candidates = [Path(self.base_dir) / name]
            if search_env and os.environ.get(search_env):
                candidates.append(Path(os.environ[search_env]) / name)
            if search_env:
                candidates.append(traces_dir() / name)
        for c in candidates:
            if c.is_file():
                return str(c.resolve())
        where = " or ".join(str(c) for c in candidates)
        self.error(path, f"file not found: {where}",
                   f"set {search_env} to the traces folder" if search_env else None)
        return str(candidates[0])

    def trace(self, doc: dict[str, Any]) -> TraceSource:
        path: Path_ = ("load", "trace", "file")
        resolved = self.resolve_file(doc["file"], path, TRACES_ENV)
        fmt = doc["format"]
        if fmt is None:
            lower = doc["file"].lower()
            if ".csv" in lower:
                fmt = "azure"
            elif ".jsonl" in lower:
                fmt = "mooncake"
            else:
                self.error(("load", "trace"), "cannot tell the trace format from the file name",
                           "add format: azure or format: mooncake")
                fmt = "azure"
        return TraceSource(resolved, fmt, doc["offset"], doc["speedup"])

    def cohort(self, doc: dict[str, Any], path: Path_) -> Cohort:
        countries = tuple(doc["countries"] or ())
        subnets = tuple(doc["subnets"] or ())
        if not countries and not subnets:
            self.error(path, f"cohort '{doc['name']}' needs countries or subnets",
                       "e.g. countries: [DE, FR]")
        for i, s in enumerate(subnets):
            try:
                ipaddress.ip_network(s, strict=True)
            except ValueError as exc:
                self.error((*path, "subnets", i), f"invalid subnet {s!r}: {exc}")
        residency = None
        if doc["residency"] is not None:
            res = doc["residency"]
            residency = Residency(tuple(res["regions"] or ()), tuple(res["jurisdictions"] or ()))
            if not residency.regions and not residency.jurisdictions:
                self.error((*path, "residency"), "a residency needs regions or jurisdictions")
        return Cohort(doc["name"], doc["share"], countries, subnets,
                      doc["subnets_per_country"], residency)

    # -- targets and faults ---------------------------------------------------------------

    def target(self, doc: dict[str, Any], path: Path_, name: str | None = None) -> Target:
        sel = doc["select"] or {}
        if doc["kind"] == "region" and sel.get("gpu"):
            self.error((*path, "select", "gpu"), "a region target selects regions, not GPUs",
                       "use kind: gpu")
        return Target(name or str(path[-1]), doc["kind"], tuple(sel.get("region") or ()),
                      tuple(sel.get("jurisdiction") or ()), tuple(sel.get("gpu") or ()),
                      doc["mode"], doc["on_empty"])

    def faults(self, docs: list[dict[str, Any]], load: Load, targets: dict[str, Target],
               blast: BlastRadius) -> tuple[Fault, ...]:
        ids = [d["id"] for d in docs]
        for i, fid in enumerate(ids):
            if fid in ids[:i]:
                self.error(("method", i, "id"), f"duplicate fault id '{fid}'")
        by_id = {d["id"]: (i, d) for i, d in enumerate(docs)}
        starts: dict[str, float | None] = {}

        def start_of(fid: str, stack: tuple[str, ...]) -> float | None:
            if fid in starts:
                return starts[fid]
            i, d = by_id[fid]
            spec = d["start"]
            path: Path_ = ("method", i, "start")
            value: float | None
            if isinstance(spec, float):
                value = spec
            elif spec.get("phase") is not None and spec.get("after") is None:
                try:
                    value = load.phase_start(spec["phase"]) + spec["plus"]
                except KeyError:
                    self.error((*path, "phase"), f"unknown phase '{spec['phase']}'",
                               did_you_mean(spec["phase"], [p.name for p in load.phases]))
                    value = None
            elif spec.get("after") is not None and spec.get("phase") is None:
                ref = spec["after"]
                if ref not in by_id:
                    self.error((*path, "after"), f"unknown fault id '{ref}'",
                               did_you_mean(ref, by_id))
                    value = None
                elif ref in stack:
                    self.error((*path, "after"), "start times form a cycle: "
                               + " -> ".join((*stack, ref)))
                    value = None
                else:
                    before = start_of(ref, (*stack, fid))
                    value = None if before is None else \
                        before + by_id[ref][1]["duration"] + spec["plus"]
            else:
                self.error(path, "give either phase or after", "e.g. {phase: spike, plus: 10s}")
                value = None
            starts[fid] = value
            return value

        out = []
        for i, d in enumerate(docs):
            path: Path_ = ("method", i)
            ftype = FaultType(d["type"])
            start = start_of(d["id"], (d["id"],))
            params = self.fault_params(ftype, path)
            if ftype is FaultType.TENANT_FLOOD and not load.tenants:
                self.error(path, "a tenant.flood needs load.tenants: the tenants the rest of "
                           "the load sends as", "e.g. tenants: [{name: gold, share: 1}]")
            target_name = self.fault_target(ftype, d["target"], path, targets)
            if start is not None and start + d["duration"] > load.duration + 1e-9:
                self.error((*path, "duration"),
                           f"fault '{d['id']}' ends at {start + d['duration']:g}s, after the "
                           f"load ends ({load.duration:g}s)",
                           "lengthen the phases or shorten the fault")
            if target_name and blast.regions:
                t = targets[target_name]
                outside = [r for r in t.regions if not any(c in "*?[" for c in r)
                           and r not in blast.regions]
                if outside:
                    self.error((*path, "target"), f"target '{target_name}' selects "
                               f"{', '.join(outside)}, outside the blast radius "
                               f"({', '.join(blast.regions)})")
            out.append(Fault(d["id"], ftype, start or 0.0, d["duration"], target_name, params))
        return tuple(out)

    def fault_params(self, ftype: FaultType, path: Path_) -> dict[str, Any]:
        node = self.r.nodes.get((*path, "params"))
        spec = FAULT_PARAMS[ftype]
        if node is None:
            return {k: f.default for k, f in spec.fields.items()} if not any(
                f.required for f in spec.fields.values()) else self._missing_params(spec, path)
        value = spec.read(node, (*path, "params"), self.r)
        return value if value is not INVALID else {}

    def _missing_params(self, spec: Any, path: Path_) -> dict[str, Any]:
        required = [k for k, f in spec.fields.items() if f.required]
        self.error(path, f"missing params: {', '.join(required)}")
        return {}

    def fault_target(self, ftype: FaultType, target: Any, path: Path_,
                     targets: dict[str, Target]) -> str | None:
        kind = ftype.target_kind
        if kind is None:
            if target is not None:
                self.error((*path, "target"), f"a {ftype.value} fault takes no target")
            return None
        if target is None:
            self.error(path, f"a {ftype.value} fault needs a target (a {kind})")
            return None
        if isinstance(target, dict):
            name = f"{path[0]}[{path[1]}]"
            targets[name] = self.target(target, (*path, "target"), name)
            found = targets[name]
        else:
            if target not in targets:
                self.error((*path, "target"), f"unknown target '{target}'",
                           did_you_mean(target, targets) or "declare it under targets:")
                return None
            name, found = target, targets[target]
        if found.kind != kind:
            self.error((*path, "target"), f"a {ftype.value} fault needs a {kind} target, "
                       f"'{name}' is a {found.kind} target")
        return name

    # -- checks, guards, restore -----------------------------------------------------------

    def cohort_list(self, value: Any, path: Path_, load: Load) -> tuple[str, ...]:
        if value is None or value == "all":
            return ()
        names = [c.name for c in load.cohorts]
        for i, name in enumerate(value):
            if name not in names:
                self.error((*path, i), f"unknown cohort '{name}'", did_you_mean(name, names))
        return tuple(value)

    def tenant_list(self, value: Any, path: Path_, load: Load,
                    faults: tuple[Fault, ...]) -> tuple[str, ...]:
        if value is None or value == "all":
            return ()
        names = [t.name for t in load.tenants]
        names += [str(f.params.get("tenant")) for f in faults
                  if f.type is FaultType.TENANT_FLOOD]
        for i, name in enumerate(value):
            if name not in names:
                self.error((*path, i), f"unknown tenant '{name}'",
                           did_you_mean(name, names) or "name it under load.tenants")
        return tuple(value)

    def tolerance(self, ctype: CheckType, path: Path_) -> tuple[Tolerance, dict[str, Any]]:
        spec, _ = CHECK_EXPECT[ctype]
        node = self.r.nodes.get((*path, "expect"))
        if spec is None:
            if node is not None and getattr(node, "value", None):
                self.error((*path, "expect"), f"a {ctype.value} check takes no expect",
                           "name regions under healthy: or unhealthy:")
            return Tolerance(), {}
        if node is None:
            return Tolerance(), {}
        value = spec.read(node, (*path, "expect"), self.r)
        if value is INVALID:
            return Tolerance(), {}
        if ctype is CheckType.RESIDENCY:
            return Tolerance(max=0), value
        return Tolerance(value.get("min"), value.get("max")), value

    def check(self, doc: dict[str, Any], path: Path_, load: Load,
              faults: tuple[Fault, ...]) -> Check:
        ctype = CheckType(doc["type"])
        when = When(doc["when"]) if doc["when"] else CHECK_EXPECT[ctype][1]
        expect, raw = self.tolerance(ctype, path)
        cohorts = self.cohort_list(doc["cohorts"], (*path, "cohorts"), load)
        tenants = self.tenant_list(doc["tenants"], (*path, "tenants"), load, faults)
        params: dict[str, Any] = {}
        if ctype is CheckType.RESIDENCY:
            expect = Tolerance(max=0)
            if when is not When.CONTINUOUS:
                self.error((*path, "when"), "a residency check is always continuous")
            resident = [c.name for c in load.cohorts if c.resident]
            for i, name in enumerate(cohorts):
                if name in [c.name for c in load.cohorts] and name not in resident:
                    self.error((*path, "cohorts", i), f"cohort '{name}' has no residency")
            if not resident:
                self.error(path, "no cohort has a residency to check",
                           "add residency: {jurisdictions: [EU]} to a cohort")
        elif ctype is CheckType.LOST:
            params["exclude_in_flight_at_fault"] = bool(doc["exclude_in_flight_at_fault"])
            if raw.get("max_ratio") is not None:
                params["max_ratio"] = raw["max_ratio"]
            if expect.min is None and expect.max is None and "max_ratio" not in params:
                expect = Tolerance(max=0)
        elif ctype is CheckType.TTFT:
            params["quantile"] = doc["quantile"] or 0.99
            if doc["compare_to"]:
                params["compare_to"] = self.compare_to(doc["compare_to"], path, load, when,
                                                       "max_ratio")
            if expect.max is None and not doc["compare_to"]:
                self.error((*path, "expect"), "a ttft check needs expect: {max: DURATION}")
        elif ctype is CheckType.GOODPUT:
            if doc["compare_to"]:
                params["compare_to"] = self.compare_to(doc["compare_to"], path, load, when,
                                                       "min_ratio")
                if params["compare_to"].get("cohort") is not None:
                    self.error((*path, "compare_to", "cohort"), "goodput compares the same "
                               "requests in another window", "use when: before")
            elif expect.min is None and expect.max is None:
                self.error((*path, "expect"), "a goodput check needs expect: {min or max} "
                           "(requests per second) or compare_to: {when, min_ratio}")
        elif ctype is CheckType.THROTTLED:
            if not tenants:
                self.error(path, "a throttled check needs the tenants it judges",
                           "tenants: [the flooding tenant]")
            if expect.min is None:
                expect = Tolerance(min=0.9)
            params["min_admitted"] = 0.8 if doc["min_admitted"] is None \
                else doc["min_admitted"]
            params["burst"] = 60.0 if doc["burst"] is None else doc["burst"]
        elif ctype is CheckType.FAILOVER_TIME:
            if doc["fault"] is None:
                self.error(path, "a failover_time check needs the fault it times",
                           "fault: <an id from method>")
            else:
                ids = [f.id for f in faults]
                if doc["fault"] not in ids:
                    self.error((*path, "fault"), f"unknown fault id '{doc['fault']}'",
                               did_you_mean(doc["fault"], ids))
                elif next(f for f in faults if f.id == doc["fault"]).type \
                        is FaultType.TRAFFIC_SPIKE:
                    self.error((*path, "fault"), "a traffic spike has no failover to time")
            if when not in (When.DURING, When.CONTINUOUS):
                self.error((*path, "when"), "failover time is judged during the fault")
            if expect.max is None:
                self.error((*path, "expect"), "a failover_time check needs expect: {max: ...}")
            params.update(fault=doc["fault"], share=doc["share"] or 0.99,
                          window=doc["window"] or 5.0, min_requests=doc["min_requests"] or 5,
                          surviving=tuple(doc["surviving"] or ()))
        elif ctype is CheckType.TRAFFIC_SHARE:
            if bool(doc["regions"]) == bool(doc["backends"]):
                self.error(path, "a traffic_share check needs regions or backends (GPU "
                                 "servers), not both")
            params["regions"] = tuple(doc["regions"] or ())
            params["backends"] = tuple(doc["backends"] or ())
        elif ctype is CheckType.ROLLOUT:
            starts = [f.id for f in faults if f.type is FaultType.ROLLOUT_START]
            if doc["fault"] not in starts:
                self.error((*path, "fault"), "a rollout check needs the rollout.start fault "
                           "whose rollout it follows", did_you_mean(str(doc["fault"]), starts)
                           or "fault: <the id of a rollout.start fault>")
            if doc["status"] is None:
                self.error(path, "a rollout check needs the status the rollout must reach",
                           "status: rolled-back | completed | paused")
            if expect.max is None:
                self.error((*path, "expect"), "a rollout check needs expect: {max: DURATION} "
                           "(from the rollout's start to that status)")
            params.update(fault=doc["fault"], status=doc["status"])
        elif ctype is CheckType.REGION_HEALTH:
            if not doc["healthy"] and not doc["unhealthy"]:
                self.error(path, "a region_health check needs healthy or unhealthy regions")
            params.update(healthy=tuple(doc["healthy"] or ()),
                          unhealthy=tuple(doc["unhealthy"] or ()))
            if when is When.CONTINUOUS:
                self.error((*path, "when"), "region health is judged at one moment: "
                           "before, during or after")
        if ctype in (CheckType.SHED_RATIO, CheckType.ERROR_RATIO, CheckType.COMPLETED,
                     CheckType.TRAFFIC_SHARE) and expect.min is None and expect.max is None:
            self.error((*path, "expect"), f"a {ctype.value} check needs expect: {{min or max}}")
        self._unused(doc, path, ctype)
        return Check(doc["name"], ctype, when, expect, cohorts, params, tenants)

    def compare_to(self, cmp: dict[str, Any], path: Path_, load: Load, when: When,
                   ratio: str) -> dict[str, Any]:
        """A check's ``compare_to``: another cohort in the same window, or the same
        requests in another window, with the ratio bound ``ratio`` names."""
        where: Path_ = (*path, "compare_to")
        if (cmp["cohort"] is None) == (cmp["when"] is None):
            self.error(where, "compare_to needs cohort (another cohort, same window) or when "
                       "(the same requests, another window), not both")
        elif cmp["cohort"] is not None:
            self.cohort_list([cmp["cohort"]], (*where, "cohort"), load)
        elif cmp["when"] == when.value:
            self.error((*where, "when"), f"compare_to when: {cmp['when']} is the check's own "
                       "window", "e.g. when: before")
        other = "min_ratio" if ratio == "max_ratio" else "max_ratio"
        if cmp[ratio] is None:
            self.error(where, f"compare_to needs {ratio}")
        if cmp[other] is not None:
            self.error((*where, other), f"this check's compare_to takes {ratio}, not {other}")
        return {k: v for k, v in cmp.items() if v is not None}


    def _unused(self, doc: dict[str, Any], path: Path_, ctype: CheckType) -> None:
        allowed = _CHECK_FIELDS.get(ctype, set())
        for key in _OPTIONAL_FIELDS:
            if doc.get(key) is not None and key not in allowed:
                self.error((*path, key), f"a {ctype.value} check has no '{key}'")

    def guard(self, doc: dict[str, Any], path: Path_, load: Load,
              checks: tuple[Check, ...]) -> Guard:
        if doc["check"] is not None:
            names = [c.name for c in checks]
            if doc["check"] not in names:
                self.error((*path, "check"), f"unknown check '{doc['check']}'",
                           did_you_mean(doc["check"], names))
            return Guard(doc["name"] or doc["check"], "check", check=doc["check"],
                         failure_threshold=doc["failure_threshold"])
        if doc["type"] is None:
            self.error(path, "a guard needs check: NAME or type:")
            return Guard(doc["name"] or f"guard-{path[-1]}", "kill_switch")
        name = doc["name"] or f"{doc['type']}-{path[-1]}"
        if doc["type"] == "kill_switch":
            if not doc["file"]:
                self.error(path, "a kill_switch guard needs file: a path whose existence "
                                 "stops the drill")
            return Guard(name, "kill_switch", file=doc["file"])
        ctype = CheckType(doc["type"])
        if ctype in (CheckType.REGION_HEALTH, CheckType.FAILOVER_TIME, CheckType.RESIDENCY,
                     CheckType.GOODPUT, CheckType.THROTTLED):
            self.error((*path, "type"), f"a guard cannot be of type {ctype.value}",
                       "refer to a check with check: NAME")
        expect, _ = self.tolerance(ctype, path) if ctype in CHECK_EXPECT else (Tolerance(), {})
        if expect.min is None and expect.max is None:
            self.error((*path, "expect"), "a guard needs expect: {min or max}")
        cohorts = self.cohort_list(doc["cohorts"], (*path, "cohorts"), load)
        params = {"quantile": doc["quantile"] or 0.99, "min_requests": doc["min_requests"] or 5}
        return Guard(name, ctype.value, expect, doc["window"], cohorts,
                     failure_threshold=doc["failure_threshold"], params=params)

    def restore(self, doc: dict[str, Any], targets: dict[str, Target]) -> Restore:
        steps = []
        for i, s in enumerate(doc["steps"]):
            path: Path_ = ("restore", "steps", i)
            kind = s["type"].split(".")[0]
            target = s["target"]
            name = None
            if s["type"] == "process.restore":
                if not s["names"]:
                    self.error(path, "a process.restore step needs names")
            elif target is None:
                self.error(path, f"a {s['type']} step needs a target")
            elif isinstance(target, dict):
                name = f"restore[{i}]"
                targets[name] = self.target(target, (*path, "target"), name)
            elif target not in targets:
                self.error((*path, "target"), f"unknown target '{target}'",
                           did_you_mean(target, targets))
            else:
                name = target
            if name and targets[name].kind != kind:
                self.error((*path, "target"), f"a {s['type']} step needs a {kind} target")
            steps.append(RestoreStep(s["type"], name, tuple(s["names"] or ())))
        return Restore(doc["strategy"], tuple(steps), doc["wait_healthy"])
