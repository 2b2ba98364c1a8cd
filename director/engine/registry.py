"""The registry of steering scorers, by the name the policy DSL uses (``steer latency geo``).

Filled once by ``register_builtin_plugins()`` at start-up and frozen: nothing registers at
import time and nothing can write to it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from director.engine.context import DecisionContext
from director.engine.scorers import Scores

Scorer = Callable[[DecisionContext, tuple[str, ...]], Scores | None]


def register_builtin_plugins() -> Mapping[str, Scorer]:
    """The built-in scorers by steering method name, as a read-only mapping."""
    from director.engine.scorers.geo_distance import geo_scores
    from director.engine.scorers.latency import latency_scores
    from director.engine.scorers.priority import priority_scores
    from director.engine.scorers.weighted import weighted_scores

    return MappingProxyType({
        "latency": latency_scores,
        "geo": geo_scores,
        "weighted": weighted_scores,
        "priority": priority_scores,
    })
