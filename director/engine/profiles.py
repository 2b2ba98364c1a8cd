"""One routing profile per service: residency then health (filters), the service's steering
methods in the order it lists them (scorers), the lexicographic picker.

Decisions that serve are traced (``Engine.decide(explain=False)``), explain asks for an
explained run; a profile given ``timings`` times one run in ``timings.every`` of either
kind (``Profile.time_explained``).
"""

from __future__ import annotations

from director.engine.context import DecisionContext
from director.engine.registry import SteeringMethods
from policies.model import Service
from routing import Kind, PluginTimings, Profile, WeightedScorer

FILTERS = ("residency", "health")
PICKER = "lexicographic"

ServiceProfile = Profile[DecisionContext, str]


def service_profile(methods: SteeringMethods, service: Service,
                    timings: PluginTimings | None = None) -> ServiceProfile:
    """The profile deciding for ``service``, from ``methods`` and their registry."""
    registry = methods.registry
    filters = tuple(registry.create(Kind.FILTER, name).plugin for name in FILTERS)
    scorers = tuple(WeightedScorer(methods[name]) for name in service.steer)
    picker = registry.create(Kind.PICKER, PICKER).plugin
    return Profile(service.name, filters, scorers, picker, timings=timings,
                   time_explained=True)
