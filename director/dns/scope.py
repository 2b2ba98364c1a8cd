"""The ECS scope prefix an answer carries: the engine's, narrowed where it must be.

The engine reports ``Decision.scope_prefix``: the network its answer depended on. The DNS
layer never answers wider than that, and narrows it where the answer also depended on
location data the decision did not report (a located client under a service steered by a
method that reads coordinates, whose location had none, still got a location-dependent
answer). What a service's methods read is what they declare (``engine.registry.Input``):

    scope = decision.scope_prefix                          (unlocated client: always this)
    scope = max(location prefix, decision.scope_floor)     located (the location prefix when
                                                           residency rules or a method reading
                                                           where the client is apply): what
                                                           the engine computes for it, from a
                                                           decision made for another network
                                                           of the same location class
    scope = max(scope, database block prefix)              residency rules, or a method
                                                           reading coordinates
    scope = max(scope, client source prefix)               a method reading the RTT
                                                           network, with RTT data

An answer that did not depend on the client at all keeps scope 0.
"""

from __future__ import annotations

from director.engine.inputs import LOCATED
from director.engine.registry import Input
from director.engine.snapshot import Snapshot
from director.engine.types import Client, Decision
from policies.model import Service


def answer_scope(decision: Decision, client: Client, service: Service,
                 snapshot: Snapshot, reads: frozenset[Input]) -> int:
    """The scope prefix to echo in the ECS option of an answer for ``client``; ``reads``:
    what ``service``'s steering methods read (``Engine.reads``)."""
    location = client.location
    return scope_of(decision, location.network.prefixlen if location is not None else None,
                    client.network.prefixlen, service, snapshot, reads)


def scope_of(decision: Decision, located_prefix: int | None, source_prefix: int,
             service: Service, snapshot: Snapshot, reads: frozenset[Input]) -> int:
    """``answer_scope`` from prefix lengths: the client's location network's (None: not
    located) and its source network's."""
    if located_prefix is None:
        return decision.scope_prefix
    # the decision may be another network's of the same location class: rebase its scope
    located = located_prefix if service.residency or LOCATED & reads else 0
    scope = max(located, decision.scope_floor)
    if service.residency or Input.COORDINATES in reads:
        scope = max(scope, located_prefix)
    if Input.RTT_NETWORK in reads and snapshot.latency:
        scope = max(scope, source_prefix)
    return scope
