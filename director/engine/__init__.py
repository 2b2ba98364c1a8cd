"""The global tier's decision engine: one routing profile per service over regions.

Residency and health are filters, each steering method a scorer, a lexicographic picker
orders them (``routing``); the profile handler makes the outcome into the answer: all-down,
spillover, failover, unknown location, ECS scope, TTL (``handler``).

Never imports ``dns.*``: the DNS server, ``director policy explain`` and the admin API all
call ``Engine.decide`` with a ``Client`` and an immutable ``Snapshot``.
"""

from director.engine.pipeline import Engine
from director.engine.registry import (
    Input,
    SteeringMethod,
    SteeringMethods,
    register_builtin_plugins,
)
from director.engine.snapshot import RegionState, Snapshot
from director.engine.types import Client, ClientSource, Decision, Step

__all__ = ["Client", "ClientSource", "Decision", "Engine", "Input", "RegionState", "Snapshot",
           "SteeringMethod", "SteeringMethods", "Step", "register_builtin_plugins"]
