"""DNS decisions as spans: when tracing is on (``telemetry.otel``), each decision the
engine makes afresh (a memo miss: the first query of a client class, and again after any
change of state the answers read) may be sampled; a sampled one is made again with its
explain chain and written as a ``director.dns.decide`` span.

Answers served from the memos repeat a decision already made, byte for byte, so a
decision span stands for every answer given from it until the next state change; the hot
path (memo and lane hits) is untouched. The span carries the service, the client's
network and how it was located, the answered regions, the reason, the residency rules and
allowed set, the TTL, the ECS scope, each step of the chain (``director.dns.steps``) and
the correlation id (``telemetry.correlation``) that the balancer's spans of the same
clients carry.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from opentelemetry.trace import SpanKind, Tracer

from director.dns.explain import explain_lines
from director.engine.types import Client, Decision
from policies.model import Service
from telemetry.correlation import correlation_id

SPAN_NAME = "director.dns.decide"


class DecisionTrace:
    """Samples fresh engine decisions into spans."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def decided(self, service: Service, client: Client, decision: Decision,
                explained: Callable[[], Decision], scope: Callable[[Decision], int]) -> None:
        """A fresh ``decision`` for ``client``: a span if sampled (``explained`` remakes
        it with its chain, ``scope`` gives an answer's ECS scope)."""
        span = self.tracer.start_span(SPAN_NAME, kind=SpanKind.SERVER)
        if not span.is_recording():
            return
        try:
            chained = explained()
            location = client.location
            attributes: dict[str, str | int | float | bool | list[str]] = {
                "director.dns.service": service.name,
                "director.dns.client_network": str(client.network),
                "director.dns.client_source": client.source,
                "director.dns.answer": list(decision.regions),
                "director.dns.reason": decision.reason,
                "director.dns.rules": list(decision.rules),
                "director.dns.ttl": decision.ttl,
                "director.dns.ecs_scope": scope(decision),
                "director.dns.steps": json.dumps(explain_lines(chained, scope(chained))[1:]),
                "director.dns.same_as_explained": chained.regions == decision.regions,
            }
            if decision.allowed is not None:
                attributes["director.dns.allowed"] = list(decision.allowed)
            if location is not None:
                attributes["director.dns.client_place"] = location.place.describe()
            correlation = correlation_id(service.name, client.address)
            if correlation is not None:
                attributes["director.correlation_id"] = correlation
            span.set_attributes(attributes)
        finally:
            span.end()
