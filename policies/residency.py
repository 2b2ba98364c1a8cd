"""Prove, from the policy alone, that no decision path answers outside a residency rule.

For every service and every residency rule, each path a decision can take is enumerated with
the set of regions it may answer:

- ``primary``: the rule's allowed regions that serve the service (steering picks among them);
- ``failover``: the same set in steering order, minus regions that are down;
- ``spillover <from> -> <to>``: targets a hot region may spill the rule's clients to;
- ``all allowed regions down``: what the rule's ``all-down`` answers;
- ``unknown client location``: a client that cannot be located may be any rule's client, so
  what ``unknown-location`` answers must be allowed by every rule;
- ``no ECS``: with ``no-ecs resolver`` the resolver is located and the paths above apply;
  with ``no-ecs unknown`` the unknown-location path applies.

A path whose answer set leaves the allowed set is a leak, reported with its name and the
position of the directive that opens it. The decision engine (``director.engine``) enforces
the same sets at run time; ``director policy check`` also runs it exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.model import (
    AllDownKind,
    NoEcs,
    Policy,
    ResidencyRule,
    Service,
    SourcePos,
    UnknownKind,
)
from policies.reading import Reporter


@dataclass(frozen=True)
class PathCheck:
    service: str
    rule: str
    path: str
    answers: tuple[str, ...]  # regions the path may answer (empty: answers nothing)
    allowed: tuple[str, ...]
    pos: SourcePos

    @property
    def leaks(self) -> tuple[str, ...]:
        return tuple(r for r in self.answers if r not in self.allowed)

    def as_dict(self) -> dict[str, object]:
        return {"service": self.service, "rule": self.rule, "path": self.path,
                "answers": list(self.answers), "allowed": list(self.allowed),
                "ok": not self.leaks}


def rule_candidates(service: Service, rule: ResidencyRule) -> tuple[str, ...]:
    """Regions a rule's clients may be answered with on the primary and failover paths."""
    allowed = set(rule.allowed)
    return tuple(r for r in service.regions if r in allowed)


def spill_targets(service: Service, rule: ResidencyRule | None,
                  candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Where a hot region may spill this rule's clients (None rule: unrestricted clients)."""
    if service.spillover is None:
        return ()
    if rule is not None and rule.spillover_to is not None:
        return rule.spillover_to
    if service.spillover.targets is not None:
        return service.spillover.targets
    return candidates  # the next allowed region in steering order


def unknown_answers(service: Service) -> tuple[str, ...]:
    unknown = service.unknown_location
    if unknown.kind is UnknownKind.REFUSE:
        return ()
    if unknown.kind is UnknownKind.REGIONS:
        return unknown.regions
    return service.regions


def enumerate_paths(policy: Policy) -> list[PathCheck]:
    """Every (service, rule, path) with the regions it may answer."""
    checks: list[PathCheck] = []
    for service in policy.services:
        for rule in service.residency:
            checks += _rule_paths(service, rule)
    return checks


def _rule_paths(service: Service, rule: ResidencyRule) -> list[PathCheck]:
    allowed = rule.allowed
    candidates = rule_candidates(service, rule)

    def check(path: str, answers: tuple[str, ...], pos: SourcePos) -> PathCheck:
        return PathCheck(service.name, rule.name, path, answers, allowed, pos)

    out = [
        check("primary", candidates, rule.pos),
        check("failover in steering order", candidates, service.failover.pos),
    ]
    targets = spill_targets(service, rule, candidates)
    if service.spillover is not None:
        spill_pos = rule.pos if rule.spillover_to is not None else service.spillover.pos
        for source in candidates:
            for target in targets:
                if target != source:
                    out.append(check(f"spillover {source} -> {target}", (target,), spill_pos))
    if rule.all_down.kind is AllDownKind.ANSWER_ALLOWED:
        down_answers = candidates
    elif rule.all_down.kind is AllDownKind.FALLBACK:
        down_answers = rule.all_down.regions
    else:
        down_answers = ()
    out.append(check("all allowed regions down", down_answers, rule.all_down.pos))
    unknown = unknown_answers(service)
    out.append(check("unknown client location", unknown, service.unknown_location.pos))
    if service.no_ecs is NoEcs.UNKNOWN:
        out.append(check("no ECS (treated as unknown location)", unknown,
                         service.unknown_location.pos))
    else:
        out.append(check("no ECS (resolver located, paths above apply)", candidates, rule.pos))
    return out


def prove_residency(policy: Policy, report: Reporter) -> list[PathCheck]:
    """Enumerate every path; report each leak and each rule that allows no region.

    Leaking paths of one rule that open at the same directive and leak the same regions
    (spillover from each allowed region to us-east; unknown location and no ECS) are
    reported once, naming every path."""
    checks = enumerate_paths(policy)
    leaks: dict[tuple[str, str, SourcePos, tuple[str, ...]], list[PathCheck]] = {}
    for item in checks:
        if item.path == "primary" and not item.answers:
            report.at_name(item.pos, f"residency: service {item.service}, rule {item.rule}: "
                           "no region that serves the service is allowed",
                           expected="an 'allow' list that names regions serving the service")
        if item.leaks:
            leaks.setdefault((item.service, item.rule, item.pos, item.leaks), []).append(item)
    services = {service.name: service for service in policy.services}
    for (name, rule, pos, leaked), items in leaks.items():
        paths = [f"'{item.path}'" for item in items]
        named = ("path " if len(paths) == 1 else "paths ") + _and(paths)
        message = (f"residency: service {name}, rule {rule}: {named} can answer "
                   f"{', '.join(leaked)}, outside the allowed regions "
                   f"({', '.join(items[0].allowed)})")
        service = services[name]
        if items[0].path.startswith("spillover"):
            # point at the leaking target in 'to' (spillover) or in the rule's 'spillover-to'
            child = "to" if pos == (service.spillover and service.spillover.pos) else \
                "spillover-to"
            report.at_name(pos, message, child=child, words=leaked, hint=_hint(items[0]))
        elif "unknown" in items[0].path and pos == service.pos:
            report.at_name(pos, message, hint=(
                "without 'unknown-location' a client that cannot be located may be answered "
                "by any region of the service: add 'unknown-location regions ...' naming "
                "regions every rule allows, or 'unknown-location refuse'"))
        else:
            report.at_name(pos, message, words=(*leaked, "any"), hint=_hint(items[0]))
    return checks


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _hint(item: PathCheck) -> str:
    if item.path.startswith("spillover"):
        return ("limit 'to' in the spillover block to allowed regions, or set "
                "'spillover-to' (or 'spillover-to none') in the residency rule")
    if item.path.startswith("all allowed"):
        return "use 'all-down answer-allowed' (fail static) or 'all-down answer-nothing'"
    if "unknown" in item.path:
        return ("a client of unknown location may belong to this rule: answer only regions "
                "every rule allows ('unknown-location regions ...'), or 'unknown-location "
                "refuse'")
    return "restrict the service's regions to those the rule allows"


def rules_for(policy: Policy, service: Service, country: str | None,
              continent: str | None) -> tuple[ResidencyRule, ...]:
    """The service's residency rules covering a client in ``country`` / ``continent``.

    A rule covers a client when its country or continent is listed, directly or through a
    named jurisdiction. Shared by the DNS engine and the regional balancers' re-check.
    """
    found = []
    for rule in service.residency:
        clients = rule.clients
        covered = country in clients.countries or continent in clients.continents
        for name in clients.jurisdictions:
            jurisdiction = policy.jurisdiction(name)
            if jurisdiction is not None and (country in jurisdiction.countries
                                             or continent in jurisdiction.continents):
                covered = True
        if covered:
            found.append(rule)
    return tuple(found)


def allowed_for(service: Service, rules: tuple[ResidencyRule, ...],
                located: bool) -> tuple[str, ...] | None:
    """Regions a client may be answered with or served by; None when unrestricted.

    A located client: the intersection of its rules' allowed sets (None under no rule). An
    unlocated client may be any rule's client: what ``unknown-location`` answers, within
    every rule's allowed set.
    """
    if not located:
        allowed = set(unknown_answers(service))
        for rule in service.residency:
            allowed &= set(rule.allowed)
        return tuple(r for r in service.regions if r in allowed)
    if not rules:
        return None
    allowed = set(service.regions)
    for rule in rules:
        allowed &= set(rule.allowed)
    return tuple(r for r in service.regions if r in allowed)
