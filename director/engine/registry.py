"""The global tier's plugins in a ``routing.Registry``: the residency and health filters, one
scorer per steering method, by the name the policy DSL uses (``steer latency geo``), and the
lexicographic picker.

Each steering method is a scorer and the inputs it reads (``Input``, declared by the scorer
itself). What a decision depends on, and so the DNS answer memo's key, the ECS scope of an
answer and the location classes of the GeoIP database, is derived from those declarations
(``inputs_of``): a new method that declares what it reads is memoised and scoped correctly
without touching the DNS layer. Adding one is a module under ``scorers/`` and a line here.

Filled once by ``register_builtin_plugins()`` at start-up and frozen: nothing registers at
import time and nothing can write to it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from director.engine.context import DecisionContext
from director.engine.inputs import LOCATED, Input
from director.engine.scorers import Scores
from routing import Kind, PluginSpec, Registry

__all__ = ["LOCATED", "Input", "SteeringMethod", "SteeringMethods", "builtin_registry",
           "inputs_of", "register_builtin_plugins"]


class SteeringMethod(Protocol):
    """A steering method: a ``routing.Scorer`` of regions that declares what it reads."""

    name: str
    reads: frozenset[Input]

    def score(self, request: DecisionContext, candidates: Sequence[str]) -> Scores | None: ...


class SteeringMethods(Mapping[str, SteeringMethod]):
    """The steering methods of a frozen registry by name, each built once."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._methods: dict[str, SteeringMethod] = {
            name: registry.create(Kind.SCORER, name).plugin
            for name in registry.names(Kind.SCORER)}

    def __getitem__(self, name: str) -> SteeringMethod:
        return self._methods[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._methods)

    def __len__(self) -> int:
        return len(self._methods)


def builtin_registry() -> Registry:
    """A frozen registry of the built-in filters, steering methods and picker."""
    from director.engine.filters.health import HealthFilter
    from director.engine.filters.residency import ResidencyFilter
    from director.engine.lexicographic import LexicographicPicker
    from director.engine.scorers.geo_distance import GeoScorer
    from director.engine.scorers.latency import LatencyScorer
    from director.engine.scorers.priority import PriorityScorer
    from director.engine.scorers.weighted import RegionWeightScorer

    registry = Registry()
    for spec in (
        PluginSpec(Kind.FILTER, "residency", ResidencyFilter),
        PluginSpec(Kind.FILTER, "health", HealthFilter),
        PluginSpec(Kind.SCORER, "latency", LatencyScorer),
        PluginSpec(Kind.SCORER, "geo", GeoScorer),
        PluginSpec(Kind.SCORER, "weighted", RegionWeightScorer),
        PluginSpec(Kind.SCORER, "priority", PriorityScorer),
        PluginSpec(Kind.PICKER, "lexicographic", LexicographicPicker),
    ):
        registry.register(spec)
    registry.freeze()
    return registry


def register_builtin_plugins() -> SteeringMethods:
    """The built-in steering methods by name (read-only), over a frozen registry of the
    built-in plugins (``SteeringMethods.registry``)."""
    return SteeringMethods(builtin_registry())


def inputs_of(methods: Mapping[str, SteeringMethod], steer: Iterable[str]) -> frozenset[Input]:
    """Everything the steering methods ``steer`` read, together."""
    return frozenset().union(*(methods[name].reads for name in steer))
