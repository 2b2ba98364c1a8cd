"""The engine-run half of the residency proof: run the real decision engine against the
states that could make it cross a border, and report any answer outside a rule's allowed set.

The policy proof (``policies.residency``) reasons about paths; this runs ``Engine.decide``.
For every service with residency rules:

1. **Classify.** One decision for every shape of location a rule's clients may have
   (``policies.residency.rule_places``: each country it holds, each continent it names or
   holds a country of as a continent-only record, each country beside a represented one):
   the client's class is the rules the engine matched plus the rule the place came from.
   The expected set of a class is the intersection of those rules' ``allow`` lists, so an
   engine that fails to match a rule (a continent-only client taken for no rule's) is
   caught too. Clients of unknown location and clients without location form two more
   classes; what they may get is what every rule allows.
2. **Run the border states**, per class, with the client placed at every region of the
   service in turn (so that every region is the nearest once). Relative to the region the
   engine picks when all is well (``p``): all up and cold; ``p`` hot; all hot; ``p`` down;
   ``p`` down and the rest hot; every allowed region down (the rest cold, then hot); every
   region down; only one forbidden region up. Hot states run four client subnets each, so
   that spillover's hash moves some and keeps others. Placements at forbidden regions run
   the cold, all-hot, allowed-down and only-forbidden-up states.
3. **Exhaustive when small.** When the whole product of up/down per region times loads
   (none hot, all hot, each hot alone) fits ``exhaustive_budget`` decisions, it runs too.

The report says what ran: classes, placements, decisions, which services were exhaustive,
and, per service, that every region was placed, down and hot in some checked state. Nothing
is capped: a region of the service is never left out.
"""

from __future__ import annotations

import ipaddress
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from director.engine.pipeline import Engine
from director.engine.snapshot import RegionState, Snapshot
from director.engine.types import Client, ClientSource
from director.geo import Location
from policies.matching import Place
from policies.model import Policy, ResidencyRule, Service
from policies.residency import rule_places

EXHAUSTIVE_BUDGET = 20_000  # decisions per service for the full up/down x load product
HOT_SUBNETS = 4
UNLOCATED_SUBNETS = 2
_BASE = int(ipaddress.ip_address("192.0.2.1"))
_NETWORK = ipaddress.ip_network("192.0.2.0/24")


@dataclass(frozen=True)
class Violation:
    service: str
    rule: str
    client: str
    down: tuple[str, ...]
    hot: tuple[str, ...]
    answer: tuple[str, ...]
    allowed: tuple[str, ...]

    def describe(self) -> str:
        return (f"service {self.service}, rule {self.rule}: client {self.client} with "
                f"down={list(self.down)} hot={list(self.hot)} got {list(self.answer)}, "
                f"allowed {list(self.allowed)}")


@dataclass(frozen=True)
class ServiceCoverage:
    """What ran for one service; ``missing`` lists regions never placed, down or hot.
    ``attested``: nothing ran here, the process that stored the policy ran this proof with
    the same code (``director.proof_digest``)."""

    service: str
    regions: int
    classes: int
    placements: int
    decisions: int
    exhaustive: bool
    missing: tuple[str, ...]
    attested: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"service": self.service, "regions": self.regions, "classes": self.classes,
                "placements": self.placements, "decisions": self.decisions,
                "exhaustive": self.exhaustive, "missing": list(self.missing),
                "attested": self.attested}


@dataclass(frozen=True)
class EngineProof:
    violations: tuple[Violation, ...]
    services: tuple[ServiceCoverage, ...]
    seconds: float

    @property
    def decisions(self) -> int:
        return sum(s.decisions for s in self.services)

    @property
    def ok(self) -> bool:
        return not self.violations and not any(s.missing for s in self.services)

    def summary(self) -> str:
        """One line: decisions, services, how they were checked."""
        if not self.services:
            return "no residency rules to run"
        ran = [s for s in self.services if not s.attested]
        attested = len(self.services) - len(ran)
        also = f"; {attested} proven by the policy's writer" if attested else ""
        if not ran:
            return f"all {attested} services proven by the policy's writer"
        exhaustive = sum(s.exhaustive for s in ran)
        classes = sum(s.classes for s in ran)
        placements = sum(s.placements for s in ran)
        how = (f"{exhaustive} of {len(ran)} services exhaustively, the rest on the "
               "border states" if exhaustive else "on the border states")
        return (f"{self.decisions} engine decisions over {classes} client classes and "
                f"{placements} placements, {how}, every region included, "
                f"{self.seconds:.2f} s{also}")

    def as_dict(self) -> dict[str, object]:
        return {"decisions": self.decisions, "seconds": round(self.seconds, 3),
                "violations": [v.describe() for v in self.violations],
                "services": [s.as_dict() for s in self.services]}


@dataclass
class _Run:
    """Decisions for one service, with what they covered."""

    engine: Engine
    service: Service
    violations: list[Violation] = field(default_factory=list)
    decisions: int = 0
    placed: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    hot: set[str] = field(default_factory=set)
    snapshots: dict[tuple[frozenset[str], frozenset[str]], Snapshot] = field(
        default_factory=dict)

    def decide(self, label: str, rule: str, client: Client, allowed: frozenset[str],
               down: frozenset[str], hot: frozenset[str]) -> tuple[str, ...]:
        snapshot = self.snapshots.get((down, hot))
        if snapshot is None:
            snapshot = self.snapshots[(down, hot)] = self._snapshot(down, hot)
        answer = self.engine.decide(self.service, client, snapshot, explain=False).regions
        self.decisions += 1
        self.down |= down
        self.hot |= hot
        if any(region not in allowed for region in answer):
            self.violations.append(Violation(
                self.service.name, rule, label, _ordered(self.service, down),
                _ordered(self.service, hot), answer, _ordered(self.service, allowed)))
        return answer

    def _snapshot(self, down: frozenset[str], hot: frozenset[str]) -> Snapshot:
        threshold = self.service.spillover.threshold if self.service.spillover else 1.0
        return Snapshot(1, {r: RegionState(healthy=r not in down,
                                           utilization=threshold * (3.0 if r in hot else 0.5))
                            for r in self.service.regions})


@dataclass(frozen=True)
class _Class:
    """Clients the engine treats alike: a representative place and the regions allowed."""

    label: str
    rule: str
    country: str | None
    continent: str | None
    located: bool
    allowed: frozenset[str]
    represented: str | None = None


def run_engine_proof(policy: Policy, *, engine: Engine | None = None,
                     exhaustive_budget: int = EXHAUSTIVE_BUDGET) -> EngineProof:
    """Run the engine over the border states of every service with residency rules."""
    start = time.perf_counter()
    engine = engine or Engine(policy)
    violations: list[Violation] = []
    coverage: list[ServiceCoverage] = []
    for service in policy.services:
        if not service.residency:
            continue
        run = _Run(engine, service)
        classes = _classify(policy, service, run)
        placements = 0
        for cls in classes:
            placements += _border_states(policy, service, cls, run)
        exhaustive = _product_size(service, classes) <= exhaustive_budget
        if exhaustive:
            _product(policy, service, classes, run)
        missing = tuple(r for r in service.regions
                        if r not in run.placed or r not in run.down or r not in run.hot)
        violations += run.violations
        coverage.append(ServiceCoverage(service.name, len(service.regions), len(classes),
                                        placements, run.decisions, exhaustive, missing))
    return EngineProof(tuple(violations), tuple(coverage), time.perf_counter() - start)


def _classify(policy: Policy, service: Service, run: _Run) -> list[_Class]:
    everyone = frozenset(service.regions)
    for rule in service.residency:
        everyone &= frozenset(rule.allowed)
    by_rules = {rule.name: rule for rule in service.residency}
    found: dict[tuple[str, tuple[str, ...]], _Class] = {}
    first = policy.region(service.regions[0])
    for rule, where in _places(policy, service):
        label = where.describe()
        country, continent, represented = _fields(where)
        location = Location(country, continent, first.latitude, first.longitude, _NETWORK,
                            represented)
        decision = run.engine.decide(service, _client(location, 0), Snapshot(), explain=False)
        run.decisions += 1
        names = tuple(sorted({rule.name, *decision.rules}))
        allowed = frozenset(service.regions)
        for name in names:
            if name in by_rules:
                allowed &= frozenset(by_rules[name].allowed)
        if any(region not in allowed for region in decision.regions):
            run.violations.append(Violation(service.name, rule.name, label, (), (),
                                            decision.regions, _ordered(service, allowed)))
        # keyed by what the engine matched: a place it misclassifies gets its own class
        found.setdefault((rule.name, tuple(sorted(decision.rules))),
                         _Class(label, rule.name, country, continent, True, allowed,
                                represented))
    return [*found.values(),
            _Class("unknown", "*", None, None, False, everyone),
            _Class("no-location", "*", None, None, False, everyone)]


def _places(policy: Policy, service: Service) -> Iterator[tuple[ResidencyRule, Place]]:
    for rule in service.residency:
        for where in rule_places(policy, rule):
            yield rule, where


def _fields(where: Place) -> tuple[str | None, str | None, str | None]:
    """A record's country, continent and represented country that place a client at
    ``where`` (a place of ``rule_places``: one or two countries, or one continent)."""
    countries = sorted(where.countries)
    if countries:
        return countries[0], None, countries[1] if len(countries) > 1 else None
    return None, next(iter(where.continents), None), None


def _border_states(policy: Policy, service: Service, cls: _Class, run: _Run) -> int:
    """The targeted states for one class at every placement; the number of placements."""
    regions = frozenset(service.regions)
    allowed = cls.allowed
    forbidden = [r for r in service.regions if r not in allowed]
    nothing: frozenset[str] = frozenset()
    placements = service.regions if cls.located else service.regions[:1]
    for place in placements:
        run.placed.add(place)

        def decide(down: frozenset[str], hot: frozenset[str], subnets: int = 1,
                   place: str = place) -> tuple[str, ...]:
            answers = [run.decide(f"{cls.label}@{place}#{index}", cls.rule,
                                  _located(policy, cls, place, index), allowed, down, hot)
                       for index in range(subnets)]
            return answers[0]

        if place not in allowed and cls.located:
            # the residency filter drops ``place`` itself: the placement only changes which
            # allowed region is nearest; tempt the engine with forbidden regions up and cool
            decide(nothing, nothing)
            decide(allowed, regions - allowed)
            decide(regions - {place}, nothing)
            continue
        cold = decide(nothing, nothing)
        decide(nothing, regions, HOT_SUBNETS)
        decide(allowed, nothing)
        decide(allowed, regions - allowed)
        decide(regions, nothing)
        for alone in forbidden[:1]:
            decide(regions - {alone}, nothing)
        if cold:
            primary = frozenset(cold[:1])
            decide(nothing, primary, HOT_SUBNETS)
            decide(primary, nothing)
            decide(primary, regions - primary, HOT_SUBNETS)
    if not cls.located:  # no coordinates to place: every region hot and down on its own
        for region in service.regions:
            one = frozenset((region,))
            run.placed.add(region)
            for index in range(UNLOCATED_SUBNETS):
                who = _located(policy, cls, service.regions[0], index)
                run.decide(f"{cls.label}#{index}", cls.rule, who, allowed, nothing, one)
            run.decide(cls.label, cls.rule, _located(policy, cls, service.regions[0]),
                       allowed, one, nothing)
    return len(placements)


def _product_size(service: Service, classes: list[_Class]) -> int:
    n = len(service.regions)
    clients = sum(n if cls.located else 1 for cls in classes) * HOT_SUBNETS
    return (2 ** n) * (n + 2) * clients


def _product(policy: Policy, service: Service, classes: list[_Class], run: _Run) -> None:
    """Every combination of regions up and down, times loads: none hot, all hot, each hot
    alone; for every class at every placement and four subnets."""
    regions = service.regions
    loads = [frozenset(), frozenset(regions), *(frozenset((r,)) for r in regions)]
    clients = []
    for cls in classes:
        for place in (regions if cls.located else regions[:1]):
            for index in range(HOT_SUBNETS):
                clients.append((cls, place, index, _located(policy, cls, place, index)))
    for bits in itertools.product((True, False), repeat=len(regions)):
        down = frozenset(r for r, up in zip(regions, bits, strict=True) if not up)
        for hot in loads:
            for cls, place, index, client in clients:
                run.decide(f"{cls.label}@{place}#{index}", cls.rule, client, cls.allowed,
                           down, hot)


def _located(policy: Policy, cls: _Class, place: str, index: int = 0) -> Client:
    if not cls.located:
        location = None if cls.label == "no-location" else \
            Location(None, None, None, None, _NETWORK)
        return _client(location, index, ClientSource.RESOLVER if location else ClientSource.ECS)
    region = policy.region(place)
    return _client(Location(cls.country, cls.continent, region.latitude, region.longitude,
                            _NETWORK, cls.represented), index)


def _client(location: Location | None, index: int,
            source: str = ClientSource.ECS) -> Client:
    address = ipaddress.ip_address(_BASE + index * 256)  # one /24 each: spill hashes differ
    return Client(address, ipaddress.ip_network((address, 24), strict=False), source, location)


def _ordered(service: Service, names: frozenset[str] | set[str]) -> tuple[str, ...]:
    return tuple(r for r in service.regions if r in names)
