"""The registry of steering methods, by the name the policy DSL uses (``steer latency geo``).

Each method is a scorer and the inputs it reads (``Input``). What a decision depends on,
and so the DNS answer memo's key, the ECS scope of an answer and the location classes of
the GeoIP database, is derived from those declarations (``inputs_of``): a new method that
declares what it reads is memoised and scoped correctly without touching the DNS layer.

Filled once by ``register_builtin_plugins()`` at start-up and frozen: nothing registers at
import time and nothing can write to it afterwards.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from director.engine.context import DecisionContext
from director.engine.scorers import Scores

Scorer = Callable[[DecisionContext, tuple[str, ...]], Scores | None]


class Input(enum.Enum):
    """What of the client or the state a steering method reads, beyond the candidates."""

    COORDINATES = "coordinates"  # the client's latitude and longitude (GeoIP)
    RTT_NETWORK = "rtt network"  # the measured-RTT network holding the client, and its RTTs
    CLIENT_HASH = "client hash"  # the client's hashing key (its bucket or a random draw)


LOCATED = frozenset({Input.COORDINATES, Input.RTT_NETWORK})  # depend on where the client is


@dataclass(frozen=True)
class SteeringMethod:
    name: str
    score: Scorer
    reads: frozenset[Input]


def register_builtin_plugins() -> Mapping[str, SteeringMethod]:
    """The built-in steering methods by name, as a read-only mapping."""
    from director.engine.scorers.geo_distance import geo_scores
    from director.engine.scorers.latency import latency_scores
    from director.engine.scorers.priority import priority_scores
    from director.engine.scorers.weighted import weighted_scores

    methods = [
        SteeringMethod("latency", latency_scores, frozenset({Input.RTT_NETWORK})),
        SteeringMethod("geo", geo_scores, frozenset({Input.COORDINATES})),
        SteeringMethod("weighted", weighted_scores, frozenset({Input.CLIENT_HASH})),
        SteeringMethod("priority", priority_scores, frozenset()),
    ]
    return MappingProxyType({m.name: m for m in methods})


def inputs_of(methods: Mapping[str, SteeringMethod], steer: Iterable[str]) -> frozenset[Input]:
    """Everything the steering methods ``steer`` read, together."""
    return frozenset().union(*(methods[name].reads for name in steer))
