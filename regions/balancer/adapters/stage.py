# SPDX-License-Identifier: Apache-2.0
"""Stage: a request for a LoRA adapter goes where the adapter is held, loaded first if
need be (``placement.decide``, ``loader.ensure``).

The backends holding an adapter list it among their models (``BackendPool.set_adapters``),
so the ``model`` filter keeps exactly them and the usual scorers choose among them. A
request for an adapter no usable server can hold gets 503; one whose load failed goes to
a holder if there is one, else 503. A holder that answers 404 (it lost the adapter: a
restart) stops counting as one until it lists it again. Holders whose batch has no room
for the adapter (``placement.crowded``) are left out of this request's choice while
another holder has room.

``counted(outcome)`` is told each adapter request's outcome: ``hit`` (a holder within the
load bound), ``load`` (this request started a load), ``joined`` (it waited for a load
already under way), ``queued`` (holders all busy, nowhere to load), ``refused``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from aiohttp import web

from regions.balancer.adapters.loader import AdapterLoader
from regions.balancer.adapters.placement import AdapterPlacement, Load, Refuse
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.refusals import error_response
from regions.balancer.scheduling.backends import BackendPool


class PlaceAdapter:
    """Stage: route an adapter's request to its holders, loading it where needed."""

    def __init__(self, placement: AdapterPlacement, loader: AdapterLoader, pool: BackendPool,
                 counted: Callable[[str], None] | None = None) -> None:
        self.placement = placement
        self.loader = loader
        self.pool = pool
        self.counted = counted or (lambda outcome: None)

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        info = exchange.info
        spec = self.placement.spec(info.model) if info is not None else None
        if spec is None:
            return await call_next(exchange)
        assert info is not None  # an adapter is named by a parsed request
        views = self.pool.snapshot().backends
        decision = self.placement.decide(spec.name, views)
        if isinstance(decision, Refuse):
            self.counted("refused")
            return error_response(503, decision.why, "service_unavailable")
        if isinstance(decision, Load):
            joined = self.loader.under_way(decision.backend, spec.name)
            self.counted("joined" if joined else "load")
            loaded = await self.loader.ensure(decision.backend, spec.name, decision.evict)
            if not loaded and not any(b.usable and spec.name in b.models
                                      for b in self.pool.snapshot().backends):
                return error_response(503, f"LoRA adapter {spec.name} could not be loaded "
                                           f"on backend {decision.backend}",
                                      "service_unavailable")
        else:
            self.counted("queued" if decision.queued else "hit")
        holders = [b.name for b in self.pool.snapshot().backends
                   if b.usable and spec.name in b.models and b.name not in info.exclude]
        crowded = self.placement.crowded(spec.name, holders)
        if crowded and len(crowded) < len(holders):
            exchange.info = replace(info, exclude=info.exclude | crowded)
        try:
            resp = await call_next(exchange)
        finally:
            for backend in exchange.bound:
                self.placement.released(backend, spec.name)
        if exchange.served_by is not None:
            if resp.status == 404:
                self.loader.forget(exchange.served_by, spec.name)
            else:
                self.placement.used(exchange.served_by, spec.name)
        return resp
