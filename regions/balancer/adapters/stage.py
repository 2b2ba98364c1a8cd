# SPDX-License-Identifier: Apache-2.0
"""Stage: a request for a LoRA adapter goes where the adapter is held, loaded first if
need be (``placement.decide``, ``loader.ensure``).

The backends holding an adapter list it among their models (``BackendPool.set_adapters``),
so the ``model`` filter keeps exactly them and the usual scorers choose among them. A
request for an adapter no usable server can hold gets 503; one whose load failed goes to
a holder if there is one, else 503. A holder that answers 404 (it lost the adapter: a
restart) stops counting as one until it lists it again. Holders whose batch has no room
for the adapter (``placement.crowded``) are left out of this request's choice while
another holder has room. A request whose adapter was evicted from every holder between
its placement and its binding (no server serves it: nothing was sent) is placed again.

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
from regions.balancer.types import RequestInfo

PLACEMENTS = 3  # times a request is placed again when its adapter left every holder


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
        for _ in range(PLACEMENTS):
            refused = await self._place(spec.name)
            if refused is not None:
                return refused
            exchange.info = self._roomy(spec.name, info)
            try:
                resp = await call_next(exchange)
            finally:
                for backend in exchange.bound:
                    self.placement.released(backend, spec.name)
            if exchange.served_by is not None or resp.status != 404:
                break
            # no server held it any more when the request came to be bound (evicted for
            # another meanwhile): nothing was sent, so place it again
            exchange.bound.clear()
        if exchange.served_by is not None:
            if resp.status == 404:
                self.loader.forget(exchange.served_by, spec.name)
            else:
                self.placement.used(exchange.served_by, spec.name)
        return resp

    async def _place(self, adapter: str) -> web.Response | None:
        """Decide where ``adapter`` goes and load it there if need be; the refusal, if
        none can take it."""
        decision = self.placement.decide(adapter, self.pool.snapshot().backends)
        if isinstance(decision, Refuse):
            self.counted("refused")
            return error_response(503, decision.why, "service_unavailable")
        if isinstance(decision, Load):
            joined = self.loader.under_way(decision.backend, adapter)
            self.counted("joined" if joined else "load")
            loaded = await self.loader.ensure(decision.backend, adapter, decision.evict)
            if not loaded and not any(b.usable and adapter in b.models
                                      for b in self.pool.snapshot().backends):
                return error_response(503, f"LoRA adapter {adapter} could not be loaded "
                                           f"on backend {decision.backend}",
                                      "service_unavailable")
        else:
            self.counted("queued" if decision.queued else "hit")
        return None

    def _roomy(self, adapter: str, info: RequestInfo) -> RequestInfo:
        """``info`` without the holders whose batch has no room, while another has."""
        holders = [b.name for b in self.pool.snapshot().backends
                   if b.usable and adapter in b.models and b.name not in info.exclude]
        crowded = self.placement.crowded(adapter, holders)
        if crowded and len(crowded) < len(holders):
            return replace(info, exclude=info.exclude | crowded)
        return info
