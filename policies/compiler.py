"""Compile syntax trees into the frozen ``Policy`` model.

Includes are spliced in where they stand (at top level or inside a region block) by
``policies.includes``; the compiler never touches the file system itself: it asks
``include`` for each included file. The counts that drive the work of later stages are
capped (``policies.limits``): past a cap, the directive that crossed it is reported and the
rest of its kind is left out.
Names used before they are declared are recorded as ``Ref`` objects for the validator; files
a policy names (a JWKS file) as ``FileRef`` objects for the loader, which checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies import values
from policies.compile_region import compile_region
from policies.compile_service import compile_service
from policies.compile_tenant import compile_identity, compile_tenant
from policies.deadline import Deadline, check
from policies.grammar import (
    DEFAULT_ADMIN_NETWORKS,
    DEFAULT_STALE_AFTER,
    DEFAULT_TTL,
)
from policies.includes import IncludeLoader, Splicer
from policies.limits import MAX_GPUS, MAX_REGIONS, MAX_SERVICES, MAX_TENANTS
from policies.model import (
    NOWHERE,
    HealthCheck,
    Jurisdiction,
    NameServer,
    Policy,
    Soa,
    SourcePos,
    Zone,
)
from policies.reading import Args, FileRef, Ref, Reporter, read_block
from policies.syntax import Directive, File

__all__ = ["Compiled", "IncludeLoader", "compile_file"]


@dataclass
class Compiled:
    policy: Policy | None
    refs: list[Ref]
    files: list[FileRef] = field(default_factory=list)  # files the loader checks


def compile_file(root: File, include: IncludeLoader, report: Reporter,
                 deadline: Deadline | None = None) -> Compiled:
    """Compile a parsed policy file; problems go to ``report``. Raises
    ``DeadlineExceeded`` once past ``deadline``."""
    refs: list[Ref] = []
    splicer = Splicer(include, report, deadline)
    top = splicer.top(root)
    if not top:
        report.at(SourcePos(root.name, 1, 1), "the policy declares nothing",
                  expected="a zone block, and at least one region and one service",
                  hint="policies/examples/minimal.dp is the smallest useful policy")
        return Compiled(None, refs)
    found = read_block(top, "policy", None, report)

    zone = None
    for d in found.get("zone", ()):
        zone = _zone(d, report)
    jurisdictions = tuple(
        j for d in found.get("jurisdiction", ()) if (j := _jurisdiction(d, report))
    )
    healthchecks = tuple(
        h for d in found.get("healthcheck", ()) if (h := _healthcheck(d, report))
    )
    stale_after = DEFAULT_STALE_AFTER
    for d in found.get("state", ()):
        stale_after = _state(d, report)
    regions = []
    gpus = _Count(MAX_GPUS, "GPU servers", "across every region", report)
    for d in _capped(found.get("region", []), MAX_REGIONS, "regions", report):
        check(deadline, f"reading region {_name(d)}", d.pos)
        body = [b for b in splicer.block(d) if b.name != "gpu" or gpus.admits(b)]
        region = compile_region(d, body, report, refs)
        if region is not None:
            regions.append(region)
    zone_ttl = zone.ttl if zone else DEFAULT_TTL
    services = []
    for d in _capped(found.get("service", []), MAX_SERVICES, "services", report):
        check(deadline, f"reading service {_name(d)}", d.pos)
        if (service := compile_service(d, regions, zone_ttl, report, refs)) is not None:
            services.append(service)
    files: list[FileRef] = []
    identity = None
    for d in found.get("identity", ()):
        identity = compile_identity(d, report, files)
    check(deadline, "reading the tenants")
    tenants = tuple(
        t for d in _capped(found.get("tenant", []), MAX_TENANTS, "tenants", report)
        if (t := compile_tenant(d, report, refs)) is not None
    )
    if zone is None:
        return Compiled(None, refs, files)
    policy = Policy(zone, jurisdictions, healthchecks, tuple(regions), tuple(services),
                    stale_after, tenants=tenants, identity=identity,
                    pos=root.directives()[0].pos if root.directives() else zone.pos)
    return Compiled(policy, refs, files)


def _capped(directives: list[Directive], cap: int, noun: str,
            report: Reporter) -> list[Directive]:
    """The first ``cap`` of ``directives``; the one after them is reported."""
    if len(directives) > cap:
        report.at_directive(directives[cap], f"the policy declares more than {cap} {noun}",
                            expected=f"at most {cap} {noun}",
                            hint=f"the {len(directives) - cap} from here on are not read")
    return directives[:cap]


class _Count:
    """Counts directives of one kind across blocks; the first over ``cap`` is reported."""

    def __init__(self, cap: int, noun: str, where: str, report: Reporter) -> None:
        self.cap, self.noun, self.where, self.report = cap, noun, where, report
        self.seen = 0

    def admits(self, directive: Directive) -> bool:
        self.seen += 1
        if self.seen == self.cap + 1:
            self.report.at_directive(
                directive, f"the policy declares more than {self.cap} {self.noun}",
                expected=f"at most {self.cap} {self.noun} {self.where}",
                hint="this one and those after it are not read")
        return self.seen <= self.cap


def _name(directive: Directive) -> str:
    return directive.args[0].text if directive.args else "?"


def _single(found: dict[str, list[Directive]], key: str, convert, usage: str,
            report: Reporter, default):
    for d in found.get(key, ()):
        args = Args(d, report)
        value = args.take(convert, usage)
        args.end(usage)
        return default if value is None else value
    return default


def _zone(directive: Directive, report: Reporter) -> Zone | None:
    args = Args(directive, report)
    apex = args.take(values.hostname, "<apex>")
    args.end("<apex>")
    found = read_block(directive.directives(), "zone", directive, report)
    ttl = _single(found, "ttl", values.duration, "<duration>", report, DEFAULT_TTL)
    nameservers = []
    for d in found.get("ns", ()):
        a = Args(d, report)
        host = a.take(values.hostname, "<host name> [<glue address> ...]")
        glue = [str(ip) for ip, _ in a.rest(values.ip_address, "[<glue address> ...]", 0)]
        if host is not None and a.ok:  # a bad glue address is reported once, not as missing
            nameservers.append(NameServer(host, tuple(glue), pos=d.pos))
    admin: tuple[str, ...] = DEFAULT_ADMIN_NETWORKS
    for d in found.get("admin-networks", ()):
        admin = tuple(net for net, _ in Args(d, report).rest(values.network, "<cidr> ..."))
    soa = _soa(found.get("soa", [None])[0], apex or "invalid", nameservers, report)
    if apex is None:
        return None
    return Zone(apex, ttl, soa, tuple(nameservers), admin, pos=directive.pos)


def _soa(directive: Directive | None, apex: str, nameservers: list[NameServer],
         report: Reporter) -> Soa:
    found = read_block(directive.directives(), "soa", directive, report) if directive else {}
    if directive is not None:
        Args(directive, report).end("")
    primary = nameservers[0].name if nameservers else f"ns1.{apex}"
    return Soa(
        mname=_single(found, "mname", values.hostname, "<host name>", report, primary),
        rname=_single(found, "rname", values.hostname, "<mailbox>", report, f"hostmaster.{apex}"),
        serial=_single(found, "serial", lambda t: values.integer(t, 0, 2**32 - 1, "serial"),
                       "<number>", report, None),
        refresh=_single(found, "refresh", values.duration, "<duration>", report, 3600.0),
        retry=_single(found, "retry", values.duration, "<duration>", report, 600.0),
        expire=_single(found, "expire", values.duration, "<duration>", report, 1209600.0),
        minimum=_single(found, "minimum", values.duration, "<duration>", report, 60.0),
        pos=directive.pos if directive else nameservers[0].pos if nameservers else NOWHERE,
    )


def _jurisdiction(directive: Directive, report: Reporter) -> Jurisdiction | None:
    args = Args(directive, report)
    name = args.take(lambda t: values.name(t, "jurisdiction name"), "<name>")
    args.end("<name>")
    found = read_block(directive.directives(), "jurisdiction", directive, report)
    countries: set[str] = set()
    continents: set[str] = set()
    for d in found.get("countries", ()):
        countries |= {c for c, _ in Args(d, report).rest(values.country, "<country code> ...")}
    for d in found.get("continents", ()):
        continents |= {c for c, _ in Args(d, report).rest(values.continent,
                                                          "<continent code> ...")}
    if directive.block is not None and not directive.directives():
        report.at_directive(directive, f"jurisdiction '{name}' names no country or continent",
                            expected="countries <code> ... or continents <code> ...")
    if name is None:
        return None
    return Jurisdiction(name, frozenset(countries), frozenset(continents), pos=directive.pos)


def _healthcheck(directive: Directive, report: Reporter) -> HealthCheck | None:
    args = Args(directive, report)
    name = args.take(lambda t: values.name(t, "healthcheck name"), "<name>")
    args.end("<name>")
    found = read_block(directive.directives(), "healthcheck", directive, report)
    interval = _single(found, "interval", values.duration, "<duration>", report, 5.0)
    timeout = _single(found, "timeout", values.duration, "<duration>", report,
                      min(2.0, interval))
    if timeout > interval and "timeout" in found:
        report.at_arg(found["timeout"][0].args[0],
                      "the probe timeout is longer than the probe interval",
                      expected=f"at most the interval ({interval:g}s)")
    check = HealthCheck(
        name=name or "",
        path=_single(found, "path", values.path, "<http path>", report, "/health"),
        expect=_single(found, "expect", lambda t: values.integer(t, 100, 599, "status code"),
                       "<status code>", report, 200),
        interval=interval,
        timeout=timeout,
        metrics_path=_single(found, "metrics", values.path, "<http path>", report, None),
        pos=directive.pos,
    )
    return check if name is not None else None


def _state(directive: Directive, report: Reporter) -> float:
    Args(directive, report).end("")
    found = read_block(directive.directives(), "state", directive, report)
    return _single(found, "stale-after", values.duration, "<duration>", report,
                   DEFAULT_STALE_AFTER)
