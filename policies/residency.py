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
  with ``no-ecs unknown`` the unknown-location path applies;
- ``degrade ...``: each step of the service's degradation ladder that answers elsewhere or
  otherwise: ``overflow <from> -> <to>`` runs the balancers' own re-check
  (``matching.refusal``) for every shape of location the rule's clients may have, so the
  siblings it lets them reach must be allowed; ``model <m> in <region>`` and ``cache in
  <region>`` answer in the region that already served the client (the re-check for the
  lighter model may only narrow it);
- ``client located as ...``: every shape of location the rule's clients may have (each of
  its countries, each continent it names or holds a country of, as a continent-only
  GeoIP record, each of its countries beside a represented country outside it), run
  through the real matcher (``policies.matching.coverage``): the rule must hold the client
  (or the unknown-location path take it), and where the client may go must stay inside the
  rule's allowed set. This is what makes the proof cover matching, not take it as given.

A path whose answer set leaves the allowed set is a leak, reported with its name and the
position of the directive that opens it. The decision engine (``director.engine``) enforces
the same sets at run time; ``director policy check`` also runs it exhaustively.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.continents import CONTINENT_OF
from policies.matching import Place, coverage, refusal, rule_clients, unknown_answers
from policies.model import (
    AllDownKind,
    DegradeAction,
    NoEcs,
    Policy,
    ResidencyRule,
    Service,
    SourcePos,
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


def enumerate_paths(policy: Policy) -> list[PathCheck]:
    """Every (service, rule, path) with the regions it may answer."""
    checks: list[PathCheck] = []
    for service in policy.services:
        for rule in service.residency:
            checks += _rule_paths(service, rule)
            checks += _matching_paths(policy, service, rule)
            checks += _degrade_paths(policy, service, rule)
    return checks


def rule_places(policy: Policy, rule: ResidencyRule) -> list[Place]:
    """Every shape of location a client of ``rule`` may have, one of each class: each
    country it holds, each continent it names or holds a country of (a continent-only
    record there), and each country it holds beside a represented country outside it."""
    clients = rule_clients(policy, rule)
    countries = set(clients.countries) | {c for c, k in CONTINENT_OF.items()
                                          if k in clients.continents}
    continents = set(clients.continents) | {CONTINENT_OF[c] for c in clients.countries
                                            if c in CONTINENT_OF}
    outside = next((c for c in sorted(CONTINENT_OF) if c not in countries), None)
    places = [Place(frozenset((c,))) for c in sorted(countries)]
    places += [Place(continents=frozenset((k,))) for k in sorted(continents)]
    if outside is not None:
        places += [Place(frozenset((c, outside))) for c in sorted(countries)]
    return places


def _matching_paths(policy: Policy, service: Service, rule: ResidencyRule) -> list[PathCheck]:
    """One path per class of ``rule_places``: where the matcher lets such a client go."""
    out: list[PathCheck] = []
    seen: set[tuple[bool, tuple[str, ...] | None, bool]] = set()
    for where in rule_places(policy, rule):
        held = coverage(policy, service, where)
        key = (held.located, held.allowed, rule in held.rules)
        if key in seen:  # one class per outcome: the same answers, the same verdict
            continue
        seen.add(key)
        if held.located and rule not in held.rules:
            answers = held.allowed if held.allowed is not None else service.regions
        else:
            answers = held.allowed if held.allowed is not None else ()
        out.append(PathCheck(service.name, rule.name,
                             f"client located as {where.describe()}", answers, rule.allowed,
                             rule.pos))
    return out


def _degrade_paths(policy: Policy, service: Service, rule: ResidencyRule) -> list[PathCheck]:
    """The ladder's steps, for the rule's clients in each region that may serve them."""
    candidates = rule_candidates(service, rule)
    held = [where for where in rule_places(policy, rule)
            if rule in coverage(policy, service, where).rules]
    models = service.models or (None,)
    out: list[PathCheck] = []
    for step in service.degrade:
        for source in candidates:
            if step.action is DegradeAction.OVERFLOW:
                for target in service.regions:
                    if target == source:
                        continue
                    let = any(refusal(policy, target, where, model) is None
                              for where in held for model in models)
                    out.append(PathCheck(service.name, rule.name,
                                         f"degrade overflow {source} -> {target}",
                                         (target,) if let else (), rule.allowed, step.pos))
            elif step.action is DegradeAction.MODEL:
                let = any(refusal(policy, source, where, step.model) is None for where in held)
                out.append(PathCheck(service.name, rule.name,
                                     f"degrade model {step.model} in {source}",
                                     (source,) if let else (), rule.allowed, step.pos))
            elif step.action is DegradeAction.CACHE:
                out.append(PathCheck(service.name, rule.name, f"degrade cache in {source}",
                                     (source,), rule.allowed, step.pos))
    return out


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
    if item.path.startswith("client located as"):
        return ("the matcher does not hold this rule's clients: a client that may be this "
                "rule's must be served only where the rule allows")
    if "unknown" in item.path:
        return ("a client of unknown location may belong to this rule: answer only regions "
                "every rule allows ('unknown-location regions ...'), or 'unknown-location "
                "refuse'")
    return "restrict the service's regions to those the rule allows"
