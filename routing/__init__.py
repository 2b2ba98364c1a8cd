# SPDX-License-Identifier: Apache-2.0
"""The routing core both tiers are built on: plugin kinds, a typed frozen registry with
declared parameters, the profile runner with its explain trace and per-plugin timings.

It imports no package of ours; the regional balancer (``regions.balancer``) and the global
decision engine (``director.engine``) register their plugins in it.
"""

from routing.combine import lexicographic_order, weighted_totals
from routing.errors import RegistryError
from routing.params import Param, validate
from routing.plugins import (
    BindObserver,
    Column,
    Filter,
    FilterBase,
    HoldPolicy,
    Kind,
    Nominator,
    Picker,
    Refiner,
    Role,
    Scorer,
)
from routing.profile import (
    FilterStep,
    Outcome,
    PickStep,
    Profile,
    SampleStep,
    ScoreStep,
    Step,
    WeightedScorer,
)
from routing.registry import Built, PluginSpec, Registry
from routing.timings import PluginTimings, TimingsCollector

__all__ = [
    "BindObserver", "Built", "Column", "Filter", "FilterBase", "FilterStep", "HoldPolicy",
    "Kind", "Nominator", "Outcome", "Param", "PickStep", "Picker", "PluginSpec",
    "PluginTimings", "Profile", "Refiner", "Registry", "RegistryError", "Role", "SampleStep",
    "ScoreStep", "Scorer", "Step", "TimingsCollector", "WeightedScorer",
    "lexicographic_order", "validate", "weighted_totals",
]
