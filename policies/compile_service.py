"""Compile ``service`` blocks: steering, spillover, failover, residency rules, fallbacks."""

from __future__ import annotations

import re
from collections.abc import Sequence

from policies import values
from policies.errors import did_you_mean, one_of
from policies.grammar import (
    DEFAULT_DEGRADED_TTL,
    DEFAULT_FALL,
    DEFAULT_PROBE_INTERVAL,
    DEFAULT_PROBE_TIMEOUT,
    DEFAULT_RISE,
)
from policies.model import (
    SLO_LATENCY_BUCKETS,
    STEERING_METHODS,
    Affinity,
    AllDown,
    AllDownKind,
    ClientMatch,
    DegradeAction,
    DegradeStep,
    DegradeTrigger,
    Failover,
    LatencyObjective,
    NoEcs,
    PartialLocation,
    Region,
    ResidencyRule,
    ResponseCache,
    Service,
    ServiceSlo,
    Spillover,
    UnknownKind,
    UnknownLocation,
)
from policies.reading import Args, Ref, Reporter, keyword, read_block, single
from policies.syntax import Arg, Directive


class _Context:
    def __init__(self, name: str, regions: Sequence[Region], report: Reporter, refs: list[Ref]):
        self.name = name
        self.regions = regions
        self.report = report
        self.refs = refs

    def region_list(self, pairs: list[tuple[str, Arg]]) -> tuple[str, ...]:
        for name, arg in pairs:
            self.refs.append(Ref("region", name, arg.pos, arg.width, self.name))
        return tuple(dict.fromkeys(name for name, _ in pairs))


def compile_service(directive: Directive, regions: Sequence[Region], zone_ttl: float,
                    report: Reporter, refs: list[Ref]) -> Service | None:
    args = Args(directive, report)
    name = args.take(values.hostname, "<host name>")
    args.end("<host name>")
    ctx = _Context(f"service {name}", regions, report, refs)
    found = read_block(directive.directives(), "service", directive, report)

    def one(key: str) -> Directive | None:
        return found[key][0] if key in found else None

    ttl = single(one("ttl"), values.duration, "<duration>", report, zone_ttl)
    degraded = single(one("degraded-ttl"), values.duration, "<duration>", report,
                      min(DEFAULT_DEGRADED_TTL, ttl))
    answers = single(one("answers"), lambda t: values.integer(t, 1, 8, "answer count"), "<count>",
                     report, 1)

    steer: tuple[str, ...] = ("latency", "geo")
    if (d := one("steer")) is not None:
        steer = tuple(m for m, _ in Args(d, report).rest(_steering_method, "<method> ..."))
    priority: tuple[str, ...] = ()
    if (d := one("priority")) is not None:
        priority = ctx.region_list(Args(d, report).rest(_region_name, "<region> ..."))
    served = tuple(region.name for region in regions)
    if (d := one("regions")) is not None:
        served = ctx.region_list(Args(d, report).rest(_region_name, "<region> ..."))

    models: list[str] = []
    for d in found.get("models", ()):
        models += [m for m, _ in Args(d, report).rest(lambda t: values.name(t, "model name"),
                                                      "<model> ...")]
    spillover = _spillover(one("spillover"), ctx)
    failover = _failover(one("failover"), report) if "failover" in found else Failover(
        DEFAULT_FALL, DEFAULT_RISE, DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT,
        pos=directive.pos)
    rules = tuple(
        rule for d in found.get("residency", ()) if (rule := _residency(d, ctx)) is not None
    )
    # The defaults point at the service, so that a leak through them has a place to show.
    unknown = UnknownLocation(UnknownKind.ANY, pos=directive.pos)
    if (d := one("unknown-location")) is not None:
        unknown = _unknown_location(d, ctx) or unknown
    no_ecs = NoEcs.RESOLVER
    if (d := one("no-ecs")) is not None:
        no_ecs = keyword(d, NoEcs, report) or no_ecs
    partial = None
    if (d := one("partial-location")) is not None:
        partial = keyword(d, PartialLocation, report)
    affinity = Affinity.SUBNET
    if (d := one("affinity")) is not None:
        affinity = keyword(d, Affinity, report) or affinity
    all_down = AllDown(AllDownKind.ANSWER_NOTHING)
    if (d := one("all-down")) is not None:
        all_down = _all_down(d, ctx) or all_down
    healthcheck = None
    if (d := one("healthcheck")) is not None:
        a = Args(d, report)
        arg = a.take_arg("<healthcheck name>")
        a.end("<healthcheck name>")
        if arg is not None:
            healthcheck = arg.text
            refs.append(Ref("healthcheck", arg.text, arg.pos, arg.width, ctx.name))

    cache = _cache(one("cache"), ctx)
    degrade = _degrade(one("degrade"), ctx)
    slo = _slo(one("slo"), ctx)
    if "priority" in steer and not priority:
        report.at_directive(one("steer") or directive,
                            "steering by 'priority' needs a 'priority' list",
                            expected="priority <region> ...")
    if name is None:
        return None
    return Service(
        name=name, regions=served, steer=steer, priority=priority, ttl=ttl, degraded_ttl=degraded,
        answers=answers, spillover=spillover, failover=failover, residency=rules, cache=cache,
        degrade=degrade, slo=slo,
        all_down=all_down, unknown_location=unknown, no_ecs=no_ecs, affinity=affinity,
        healthcheck=healthcheck, partial_location=partial,
        models=tuple(dict.fromkeys(models)), pos=directive.pos,
    )


def _region_name(text: str) -> str:
    return values.name(text, "region name")


def _steering_method(text: str) -> str:
    if text not in STEERING_METHODS:
        raise values.ValueProblem(f"unknown steering method '{text}'",
                                  expected=one_of(STEERING_METHODS),
                                  hint=did_you_mean(text, STEERING_METHODS))
    return text


def _spillover(directive: Directive | None, ctx: _Context) -> Spillover | None:
    if directive is None:
        return None
    report = ctx.report
    Args(directive, report).end("")
    found = read_block(directive.directives(), "spillover", directive, report)
    threshold = max_share = None
    if "at" in found:
        threshold = single(found["at"][0], values.percent, "<percent of capacity>", report, None)
    if "max" in found:
        max_share = single(found["max"][0], values.percent, "<percent of traffic>", report, None)
        if max_share is not None and not 0 < max_share <= 1:
            report.at_arg(found["max"][0].args[0], "the spill share must be above 0% and at "
                          "most 100%", expected="a percentage such as 30%")
            max_share = None
    if threshold is not None and threshold <= 0:
        report.at_arg(found["at"][0].args[0], "the spill threshold must be above 0%",
                      expected="a percentage of capacity such as 85%")
        threshold = None
    targets = None
    if "to" in found:
        targets = ctx.region_list(Args(found["to"][0], report).rest(_region_name, "<region> ..."))
    if threshold is None or max_share is None:
        return None
    return Spillover(threshold, max_share, targets, pos=directive.pos)


def _failover(directive: Directive | None, report: Reporter) -> Failover:
    if directive is None:
        return Failover(DEFAULT_FALL, DEFAULT_RISE, DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT)
    Args(directive, report).end("")
    found = read_block(directive.directives(), "failover", directive, report)

    def get(key: str, convert, usage: str, default):
        return single(found[key][0], convert, usage, report, default) if key in found else default

    fall = get("fall", lambda t: values.integer(t, 1, 100, "fall count"), "<count>", DEFAULT_FALL)
    rise = get("rise", lambda t: values.integer(t, 1, 100, "rise count"), "<count>", DEFAULT_RISE)
    interval = get("interval", values.duration, "<duration>", DEFAULT_PROBE_INTERVAL)
    timeout = get("timeout", values.duration, "<duration>", min(DEFAULT_PROBE_TIMEOUT, interval))
    if timeout > interval and "timeout" in found:
        d = found["timeout"][0]
        report.at_arg(d.args[0], "the probe timeout is longer than the probe interval",
                      expected=f"at most the interval ({interval:g}s)")
    return Failover(fall, rise, interval, timeout, pos=directive.pos)


_CLIENT_KINDS = ("jurisdiction", "country", "continent")


def _residency(directive: Directive, ctx: _Context) -> ResidencyRule | None:
    report = ctx.report
    args = Args(directive, report)
    name = args.take(lambda t: values.name(t, "rule name"), "<rule name>")
    args.end("<rule name>")
    found = read_block(directive.directives(), "residency", directive, report)
    rule_ctx = _Context(f"{ctx.name}: residency {name}", ctx.regions, report, ctx.refs)

    sets: dict[str, set[str]] = {kind: set() for kind in _CLIENT_KINDS}
    for d in found.get("clients", ()):
        a = Args(d, report)
        kind = a.take(_client_kind, "jurisdiction|country|continent <value> ...")
        if kind is None:
            continue
        convert = {"jurisdiction": lambda t: values.name(t, "jurisdiction"),
                   "country": values.country, "continent": values.continent}[kind]
        for value, arg in a.rest(convert, f"{kind} <value> ..."):
            sets[kind].add(value)
            if kind == "jurisdiction":
                report_ref = Ref("jurisdiction", value, arg.pos, arg.width, rule_ctx.name)
                ctx.refs.append(report_ref)

    allowed: tuple[str, ...] = ()
    if "allow" in found:
        allowed = _allow(found["allow"][0], rule_ctx)
    all_down = AllDown(AllDownKind.ANSWER_NOTHING)
    if "all-down" in found:
        all_down = _all_down(found["all-down"][0], rule_ctx) or all_down
    spill_to: tuple[str, ...] | None = None
    if "spillover-to" in found:
        d = found["spillover-to"][0]
        if [a.text for a in d.args] == ["none"]:
            spill_to = ()
        else:
            spill_to = rule_ctx.region_list(Args(d, report).rest(_region_name,
                                                                 "<region> ... | none"))
    cross_border: tuple[str, ...] = ()
    if "cross-border" in found:
        cross_border = rule_ctx.region_list(Args(found["cross-border"][0], report).rest(
            _region_name, "<region> ..."))
    if name is None or "allow" not in found or "all-down" not in found:
        return None
    clients = ClientMatch(frozenset(sets["jurisdiction"]), frozenset(sets["country"]),
                          frozenset(sets["continent"]))
    return ResidencyRule(name, clients, allowed, all_down, spill_to, cross_border,
                         pos=directive.pos)


def _client_kind(text: str) -> str:
    if text not in _CLIENT_KINDS:
        raise values.ValueProblem(f"unknown client selector '{text}'",
                                  expected=one_of(_CLIENT_KINDS),
                                  hint=did_you_mean(text, _CLIENT_KINDS))
    return text


def _allow(directive: Directive, ctx: _Context) -> tuple[str, ...]:
    report = ctx.report
    args = Args(directive, report)
    if args.peek() == "jurisdiction":
        args.take_arg("")
        labels = args.rest(lambda t: values.name(t, "jurisdiction label"),
                           "jurisdiction <label> ...")
        allowed: list[str] = []
        for label, arg in labels:
            matching = [r.name for r in ctx.regions if r.jurisdiction == label]
            if not matching:
                known = sorted({r.jurisdiction for r in ctx.regions})
                report.at_arg(arg, f"no region has jurisdiction '{label}'",
                              expected="a jurisdiction label of some region: " + ", ".join(known),
                              hint=did_you_mean(label, known))
            allowed += matching
        return tuple(dict.fromkeys(allowed))
    return ctx.region_list(args.rest(_region_name, "<region> ... | jurisdiction <label> ..."))


_ALL_DOWN_USAGE = "answer-allowed | answer-nothing | fallback <region> ..."


def _all_down(directive: Directive, ctx: _Context) -> AllDown | None:
    report = ctx.report
    args = Args(directive, report)
    choices = [kind.value for kind in AllDownKind]

    def convert(text: str) -> AllDownKind:
        if text not in choices:
            raise values.ValueProblem(f"unknown all-down behaviour '{text}'",
                                      expected=one_of(choices), hint=did_you_mean(text, choices))
        return AllDownKind(text)

    kind = args.take(convert, _ALL_DOWN_USAGE)
    if kind is None:
        return None
    if kind is AllDownKind.FALLBACK:
        remaining = [a.text for a in args.remaining]
        if remaining == ["any"]:
            args.take_arg("")
            return AllDown(kind, tuple(r.name for r in ctx.regions), pos=directive.pos)
        regions = ctx.region_list(args.rest(_region_name, "fallback <region> ... | fallback any"))
        return AllDown(kind, regions, pos=directive.pos) if regions else None
    args.end(_ALL_DOWN_USAGE)
    return AllDown(kind, pos=directive.pos)


def _unknown_location(directive: Directive, ctx: _Context) -> UnknownLocation | None:
    report = ctx.report
    args = Args(directive, report)
    choices = [kind.value for kind in UnknownKind]

    def convert(text: str) -> UnknownKind:
        if text not in choices:
            raise values.ValueProblem(f"unknown value '{text}' for 'unknown-location'",
                                      expected=one_of(choices), hint=did_you_mean(text, choices))
        return UnknownKind(text)

    kind = args.take(convert, "regions <region> ... | refuse | any")
    if kind is None:
        return None
    if kind is UnknownKind.REGIONS:
        regions = ctx.region_list(args.rest(_region_name, "regions <region> ..."))
        return UnknownLocation(kind, regions, pos=directive.pos) if regions else None
    args.end("refuse | any")
    return UnknownLocation(kind, pos=directive.pos)


CACHE_USAGE = "<ttl> [max <size>] [tenants <tenant> ...]"


def _cache(directive: Directive | None, ctx: _Context) -> ResponseCache | None:
    """``cache 10m max 64MB tenants acme beta``: the service's exact-match cache."""
    if directive is None:
        return None
    args = Args(directive, ctx.report)
    ttl = args.take(values.duration, CACHE_USAGE)
    max_bytes = ResponseCache.max_bytes
    if args.peek() == "max":
        args.expect("max", CACHE_USAGE)
        max_bytes = args.take(values.size, CACHE_USAGE) or max_bytes
    tenants: list[str] = []
    if args.peek() == "tenants":
        args.expect("tenants", CACHE_USAGE)
        for tenant, arg in args.rest(values.tenant_name, "<tenant> ..."):
            tenants.append(tenant)
            ctx.refs.append(Ref("tenant", tenant, arg.pos, arg.width, ctx.name))
    args.end(CACHE_USAGE)
    if ttl is None or ttl <= 0:
        return None
    return ResponseCache(ttl, max_bytes, tuple(dict.fromkeys(tenants)))


STEP_USAGE = {"model": "<model> [when <trigger> <value>]"}
TRIGGER_VALUES = {DegradeTrigger.QUEUE_WAIT: ("<duration>", values.duration),
                  DegradeTrigger.SATURATION: ("<percent>", values.percent),
                  DegradeTrigger.ERROR_RATE: ("<percent>", values.percent)}


def _degrade(directive: Directive | None, ctx: _Context) -> tuple[DegradeStep, ...]:
    """``degrade { overflow when queue-wait 2s; model small when saturation 90%; ... }``:
    the ladder, in the order written."""
    if directive is None:
        return ()
    report = ctx.report
    Args(directive, report).end("")
    read_block(directive.directives(), "degrade", directive, report)  # names and repeats
    steps = []
    for d in directive.directives():
        try:
            action = DegradeAction(d.name)
        except ValueError:
            continue  # reported by read_block
        usage = STEP_USAGE.get(d.name, "[when <trigger> <value>]")
        args = Args(d, report)
        model = None
        if action is DegradeAction.MODEL:
            model = args.take(lambda t: values.name(t, "model name"), usage)
        trigger, threshold = None, 0.0
        if args.peek() == "when":
            args.expect("when", usage)
            trigger = args.take(_trigger, usage)
            if trigger is not None:
                kind, convert = TRIGGER_VALUES[trigger]
                threshold = args.take(convert, f"when {trigger.value} {kind}") or 0.0
        args.end(usage)
        if action is not DegradeAction.MODEL or model is not None:
            steps.append(DegradeStep(action, model, trigger, threshold, pos=d.pos))
    return tuple(steps)


def _trigger(text: str) -> DegradeTrigger:
    try:
        return DegradeTrigger(text)
    except ValueError:
        raise values.ValueProblem(
            f"unknown trigger '{text}'", expected=one_of([t.value for t in DegradeTrigger]),
            hint=did_you_mean(text, [t.value for t in DegradeTrigger])) from None


LATENCY_USAGE = "p<percentile> <duration>"
MIN_PERIOD_S, MAX_PERIOD_S = 86400.0, 90 * 86400.0


def _slo(directive: Directive | None, ctx: _Context) -> ServiceSlo | None:
    """``slo { availability 99.9%; ttft p95 500ms; itl p99 50ms; period 30d; tenants a b }``:
    the service's objectives (``director slo rules``)."""
    if directive is None:
        return None
    report = ctx.report
    Args(directive, report).end("")
    found = read_block(directive.directives(), "slo", directive, report)

    def one(key: str) -> Directive | None:
        return found.get(key, [None])[0]

    availability = None
    if (d := one("availability")) is not None:
        args = Args(d, report)
        availability = args.take(_objective_share, "<percent>")
        args.end("<percent>")
    ttft = _latency(one("ttft"), report)
    itl = _latency(one("itl"), report)
    period = SERVICE_SLO_PERIOD
    if (d := one("period")) is not None:
        args = Args(d, report)
        period = args.take(_period, "<duration>") or period
        args.end("<duration>")
    tenants: list[str] = []
    if (d := one("tenants")) is not None:
        for tenant, arg in Args(d, report).rest(values.tenant_name, "<tenant> ..."):
            tenants.append(tenant)
            ctx.refs.append(Ref("tenant", tenant, arg.pos, arg.width, ctx.name))
    if availability is None and ttft is None and itl is None:
        report.at_directive(directive, "an 'slo' block needs an objective",
                            expected="availability <percent> | ttft p<percentile> <duration>"
                                     " | itl p<percentile> <duration>")
        return None
    return ServiceSlo(availability, ttft, itl, period, tuple(dict.fromkeys(tenants)),
                      pos=directive.pos)


SERVICE_SLO_PERIOD = ServiceSlo().period_s


def _latency(directive: Directive | None, report: Reporter) -> LatencyObjective | None:
    if directive is None:
        return None
    args = Args(directive, report)
    percentile = args.take(_percentile, LATENCY_USAGE)
    threshold = args.take(_bucket_duration, LATENCY_USAGE)
    args.end(LATENCY_USAGE)
    if percentile is None or threshold is None:
        return None
    return LatencyObjective(percentile, threshold)


def _objective_share(text: str) -> float:
    share = round(values.percent(text), 12)  # 99.9% is 0.999, not 0.9990000000000001
    if not 0.0 < share < 1.0:
        raise values.ValueProblem(f"objective {text} leaves no error budget" if share >= 1.0
                                  else f"objective {text} is not above 0%",
                                  expected="a percentage between 0% and 100%, e.g. 99.9%")
    return share


def _percentile(text: str) -> float:
    match = re.fullmatch(r"p(\d+(?:\.\d+)?)", text)
    if match is None or not 0.0 < float(match[1]) < 100.0:
        raise values.ValueProblem(f"'{text}' is not a percentile",
                                  expected="p<percentile> between p0 and p100, e.g. p95 or "
                                           "p99.9")
    return float(match[1])


def _bucket_duration(text: str) -> float:
    seconds = values.duration(text)
    if seconds not in SLO_LATENCY_BUCKETS:
        near = min(SLO_LATENCY_BUCKETS, key=lambda b: abs(b - seconds))
        raise values.ValueProblem(
            f"{text} is not a bound of the balancer's latency histograms",
            expected="one of " + ", ".join(_shown(b) for b in SLO_LATENCY_BUCKETS),
            hint=f"the nearest is {_shown(near)}")
    return seconds


def _shown(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def _period(text: str) -> float:
    seconds = values.duration(text)
    if not MIN_PERIOD_S <= seconds <= MAX_PERIOD_S:
        raise values.ValueProblem(f"period {text} is outside 1d to 90d",
                                  expected="a period such as 28d or 30d")
    return seconds
