"""Warnings about legal policies that are likely mistakes. A warning never blocks loading;
``director policy check --strict`` turns warnings into failures for CI pipelines.

``cross-border``: a residency rule whose ``allow`` list names a region outside the
jurisdictions its clients belong to (an EU rule allowing ``us-east``). The language allows
it, and it may be meant, but it is the first mistake people make. The clients' jurisdictions
are those the rule names (``clients jurisdiction EU``) plus every declared jurisdiction that
contains a country the rule names or a country on a continent it names (``policies.
continents``). A rule acknowledges a crossing with ``cross-border <region> ...``; an
acknowledgement of a region that does not cross is reported too, so that silencing stays
exact. When nothing tells which jurisdictions the clients belong to (no declared jurisdiction
matches), the rule is not linted.

``partial-location``: a residency rule whose clients are countries (directly or through a
jurisdiction) on a continent where GeoIP places some networks on the continent alone
(``policies.continents.CONTINENT_ONLY_RECORDS``), in a service that does not say how such
clients go. A continent-only client may be the rule's, so it is served only where every rule
it may fall under allows (``policies.matching``): safe, but maybe not what was meant. Saying
``partial-location intersect`` (or ``unknown``) in the service, or naming the continent in the
rule's clients, silences it.

``shared models``: two services with different residency (rules, ``unknown-location``,
``partial-location``) that serve one model in one region. The balancers hold every request
for the model to the rules of both (residency follows the GPUs, not the Host header), so a
client one service's DNS answers sends there may be refused. Giving each service its own
``models`` (or the same rules) silences it.

``degrade``: a ladder's ``cache`` step in a service that caches nothing (no ``cache``
directive: it never finds an answer); a ``model`` step naming a model that no GPU server
of the service's regions serves (checked only when the policy declares GPU servers), or
the service's own model.

``jwt``: a ``jwt`` block without ``issuer`` (any issuer whose tokens the key set verifies
is accepted; an ``audience`` is required by the compiler, not linted).

``tenants``: tenants declared without an ``identity`` block (no request is identified, so no
tenant's settings apply); a tenant ``models`` entry that no GPU server of the policy serves
(checked only when the policy declares GPU servers). A tenant whose ``regions`` serve none of
a service it lists is an error (``policies.validate``), not a warning.
"""

from __future__ import annotations

import dataclasses

from policies.continents import CONTINENT_OF, CONTINENT_ONLY_RECORDS
from policies.errors import Diagnostic, did_you_mean
from policies.matching import rule_clients
from policies.model import DegradeAction, Policy, ResidencyRule, Service
from policies.reading import Reporter


def lint(policy: Policy, directives: Reporter) -> list[Diagnostic]:
    """Warnings for ``policy``, positioned with the directives ``directives`` recorded."""
    report = Reporter()
    report.directives = directives.directives
    for service in policy.services:
        for rule in service.residency:
            _cross_border(policy, service, rule, report)
            if service.partial_location is None:
                _partial_location(policy, service, rule, report)
        _degrade(policy, service, report)
    _shared_models(policy, report)
    _tenants(policy, report)
    _jwt(policy, report)
    return [dataclasses.replace(d, severity="warning") for d in report.diagnostics]


def client_jurisdictions(policy: Policy, rule: ResidencyRule) -> frozenset[str]:
    """The declared jurisdictions a rule's clients may belong to."""
    clients = rule.clients
    found = set(clients.jurisdictions)
    continents = set(clients.continents) | {CONTINENT_OF[c] for c in clients.countries
                                            if c in CONTINENT_OF}
    for jurisdiction in policy.jurisdictions:
        holds = (jurisdiction.countries & clients.countries
                 or jurisdiction.continents & continents
                 or any(CONTINENT_OF.get(c) in clients.continents
                        for c in jurisdiction.countries))
        if holds:
            found.add(jurisdiction.name)
    return frozenset(found)


def _cross_border(policy: Policy, service: Service, rule: ResidencyRule,
                  report: Reporter) -> None:
    home = client_jurisdictions(policy, rule)
    if not home:
        return
    where = {region.name: region.jurisdiction for region in policy.regions}
    homes = ", ".join(sorted(home))
    crossing = [r for r in rule.allowed if where.get(r) not in home]
    unacknowledged = [r for r in crossing if r not in rule.cross_border]
    head = f"residency: service {service.name}, rule {rule.name}"
    if unacknowledged:
        named = _and([f"{r} ({where.get(r)})" for r in unacknowledged])
        listed = " ".join(unacknowledged)
        them = "it" if len(unacknowledged) == 1 else "them"
        report.at_name(
            rule.pos, f"{head}: allows {named}, outside the jurisdictions of its clients "
            f"({homes})", child="allow", words=unacknowledged[:1],
            hint=f"if {homes} clients may be served there on purpose, say so in the rule: "
            f"'cross-border {listed}'; otherwise remove {them} from 'allow'")
    for region in rule.cross_border:
        if region not in crossing:
            inside = "is not in 'allow'" if region not in rule.allowed else \
                f"is inside {where.get(region)}"
            report.at_name(
                rule.pos, f"{head}: 'cross-border {region}' acknowledges nothing: {region} "
                f"{inside}", child="cross-border", words=(region,),
                hint=f"remove {region} from 'cross-border'")


def _partial_location(policy: Policy, service: Service, rule: ResidencyRule,
                      report: Reporter) -> None:
    clients = rule_clients(policy, rule)
    partly = sorted({CONTINENT_OF[c] for c in clients.countries if c in CONTINENT_OF}
                    & CONTINENT_ONLY_RECORDS - clients.continents)
    if not partly:
        return
    named = _and(partly)
    report.at_name(
        rule.pos, f"residency: service {service.name}, rule {rule.name}: its clients are "
        f"countries on {named}, where GeoIP places some networks on the continent alone; "
        "such a client may be this rule's, so it is served only where every rule it may fall "
        "under allows", child="clients",
        hint=f"say how those clients go in the service: 'partial-location intersect' (what "
        f"happens now) or 'partial-location unknown' (as clients of unknown location); or "
        f"name the continent in the rule ('clients continent {partly[0]}') if all of it is meant")


def _degrade(policy: Policy, service: Service, report: Reporter) -> None:
    served = {model for region in policy.regions if region.name in service.regions
              for gpu in region.gpus for model in gpu.models}
    declared = any(region.gpus for region in policy.regions)
    for step in service.degrade:
        if step.action is DegradeAction.CACHE and service.cache is None:
            report.at_name(step.pos, f"service {service.name}: the 'cache' step never finds "
                           "an answer: the service caches none",
                           hint="add 'cache <ttl>' to the service, or drop the step")
        if step.model is None:
            continue
        if step.model in service.models and len(service.models) == 1:
            report.at_name(step.pos, f"service {service.name}: the 'model' step names the "
                           f"service's own model '{step.model}'", words=(step.model,),
                           hint="name a lighter model its regions also serve")
        elif declared and step.model not in served:
            report.at_name(step.pos, f"service {service.name}: no GPU server of its regions "
                           f"serves '{step.model}', so the step never serves",
                           words=(step.model,), hint=did_you_mean(step.model, served))


def _shared_models(policy: Policy, report: Reporter) -> None:
    def residency(service: Service) -> tuple[object, ...]:
        unknown = service.unknown_location
        return (service.residency, unknown.kind, unknown.regions, service.partial_location)

    shared: dict[tuple[str, str], dict[str, set[str]]] = {}
    for region in policy.regions:
        serving = [s for s in policy.services if region.name in s.regions]
        for i, first in enumerate(serving):
            for second in serving[i + 1:]:
                if residency(first) == residency(second):
                    continue
                if first.models and second.models:
                    both = set(first.models) & set(second.models)
                else:  # a service without 'models' serves every model
                    both = set(first.models or second.models) or {"*"}
                for model in both:
                    pair = shared.setdefault((first.name, second.name), {})
                    pair.setdefault(model, set()).add(region.name)
    for (first_name, second_name), models in shared.items():
        service = policy.service(second_name)
        listed = _and([f"'{m}' ({', '.join(sorted(r))})" if m != "*" else
                       f"every model ({', '.join(sorted(r))})" for m, r in sorted(models.items())])
        report.at_name(
            service.pos, f"services {first_name} and {second_name} have different residency "
            f"and both serve {listed}: the balancers hold those requests to the rules of "
            f"both, so a client either service's DNS answers may be refused there",
            hint="give each service its own 'models', or the same residency rules")


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _jwt(policy: Policy, report: Reporter) -> None:
    identity = policy.identity
    if identity is None or identity.jwt is None or identity.jwt.issuer is not None:
        return
    report.at_name(identity.pos, "jwt: no 'issuer', so a token signed by any key of the "
                   "key set is accepted whoever issued it", child="jwt",
                   hint="name the issuer your tokens carry in 'iss': issuer "
                   "https://auth.example.com/")


def _tenants(policy: Policy, report: Reporter) -> None:
    if policy.tenants and policy.identity is None:
        first = policy.tenants[0]
        report.at_name(first.pos, "the policy declares tenants but no identity block, so no "
                       "request is identified and no tenant's settings apply",
                       hint="add identity { api-keys on } (or a jwt block)")
    served = {model for region in policy.regions for gpu in region.gpus
              for model in gpu.models}
    for tenant in policy.tenants:
        for model in tenant.models:
            if served and model not in served:
                report.at_name(tenant.pos, f"tenant {tenant.name}: no GPU server of the policy "
                               f"serves the model '{model}'", child="models", words=(model,),
                               hint=did_you_mean(model, sorted(served)))
