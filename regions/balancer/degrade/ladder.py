# SPDX-License-Identifier: Apache-2.0
"""Stage: a service's degradation ladder (``degrade { ... }`` in the policy).

The ladder's steps, in the order written, are what the region does instead of serving a
request as asked:

- ``overflow``: the same model in a sibling region the client may use (``signals.overflow``:
  the residency re-check of each sibling, the tenant's regions);
- ``model <m>``: the lighter model ``m`` here, if this region may serve the client for
  ``m`` (the same residency re-check as for the model asked, against every service that
  serves ``m`` here), the tenant may use it and a server here serves it;
- ``cache``: an exact-match cache hit (the service's ``cache``; deterministic requests);
- ``shed``: 429 with a ``Retry-After`` the region keeps (``retry_promises``).

A step with a trigger (``when queue-wait 2s``, ``saturation 90%``, ``error-rate 20%``:
``region_signals``) is taken before the request is queued when its trigger holds. Then,
if no triggered step served, the request goes on as asked; if the region sheds it (429) or
has no server for it (503), every step is tried in order, triggers or not. A step that
cannot serve passes to the next. The answer says which step served it in
``x-director-degraded`` (``overflow``, ``model=<m>``, ``cache``, ``shed``); an overflowed
answer also carries ``x-director-overflow``. A request a sibling sent (overflowed) walks
no ladder: it is served or shed where it landed. A shed request that comes back at its
promised second skips the triggers and is queued first.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from policies.model import DegradeAction, DegradeStep
from regions.balancer.degrade.cache_stage import ResponseCacheStage
from regions.balancer.degrade.region_signals import Signals, read_signals
from regions.balancer.degrade.retry_promises import RetryPromises
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.refusals import error_response
from regions.balancer.http.request_info import host_name
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.signals.overflow import Overflow, is_shed
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.tenancy.residency_check import ResidencyCheck
from regions.balancer.types import RequestInfo

DEGRADED_HEADER = "x-director-degraded"
REDEEMED_PRIORITY = 1_000_000  # ahead of any priority a client may ask (clamped to 1000)

log = logging.getLogger(__name__)


class DegradeLadder:
    """Stage: walks the request's service's ladder under overload or failure."""

    def __init__(self, dispatcher: Dispatcher, tenancy: Tenancy, cache: ResponseCacheStage,
                 metrics: BalancerMetrics, overflow: Callable[[], Overflow | None],
                 residency: Callable[[], ResidencyCheck | None],
                 choose_revision: Callable[[RequestInfo], RequestInfo],
                 default: Sequence[DegradeStep] = ()) -> None:
        self.dispatcher = dispatcher
        self.tenancy = tenancy  # the policy's ladders (``Tenancy.ladders``)
        self.cache = cache
        self.metrics = metrics
        self.overflow = overflow
        self.residency = residency
        self.choose_revision = choose_revision  # the lighter model's own, if it is split
        self.default = tuple(default)  # every request's, without a policy that says
        self.promises = RetryPromises()

    def steps(self, host: str | None) -> tuple[DegradeStep, ...]:
        """The ladder of the service ``host`` names (the default without one)."""
        ladders: Mapping[str, tuple[DegradeStep, ...]] = self.tenancy.ladders
        return ladders.get(host_name(host), self.default)

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        info = exchange.info
        steps = self.steps(exchange.request.host)
        if not steps or info is None or exchange.overflowed:
            return await call_next(exchange)
        exchange.walks_ladder = True  # the overflow stage leaves its sheds to the ladder
        now = self.dispatcher.pool.clock()
        client = exchange.client.described if exchange.client is not None \
            else exchange.request.remote
        key = self.promises.key(info.tenant, client, exchange.raw)
        if self.promises.redeem(key, now):
            exchange.info = dataclasses.replace(info, priority=REDEEMED_PRIORITY)
            return self._served(await call_next(exchange))
        signals = read_signals(self.dispatcher, info.model)
        for step in steps:
            if step.trigger is not None and signals.holds(step.trigger, step.threshold):
                answer = await self._take(step, exchange, call_next, key)
                if answer is not None:
                    return answer
        answer = await call_next(exchange)
        if not (is_shed(answer) or _unserved(answer)):
            return self._served(answer)
        for step in steps:
            taken = await self._take(step, exchange, call_next, key)
            if taken is not None:
                return taken
        return answer

    def explain(self, host: str | None, model: str) -> dict[str, Any]:
        """The ladder of ``host``'s service for ``model``: each step, whether its trigger
        holds now, and the signals it reads."""
        signals = read_signals(self.dispatcher, model)
        return {"signals": signals.to_json(), "steps": [
            {"step": step.describe(), "trigger_holds": _holds(step, signals)}
            for step in self.steps(host)]}

    async def _take(self, step: DegradeStep, exchange: Exchange, call_next: Next,
                    key: str) -> web.StreamResponse | None:
        """``step``'s answer, or None when it cannot serve the request."""
        if step.action is DegradeAction.SHED:
            exchange.shed = True
            after = self.promises.promise(key, self.dispatcher.pool.clock())
            return self._count(step, error_response(
                429, f"the region is overloaded: retry after {after} s", "rate_limit_exceeded",
                headers={"Retry-After": str(after), DEGRADED_HEADER: "shed"}))
        if step.action is DegradeAction.CACHE:
            exchange.extra_headers[DEGRADED_HEADER] = "cache"
            answer = await self.cache.hit(exchange)
            if answer is None:
                del exchange.extra_headers[DEGRADED_HEADER]
            return self._count(step, answer) if answer is not None else None
        if step.action is DegradeAction.OVERFLOW:
            return await self._overflow(step, exchange)
        return await self._lighter(step, exchange, call_next)

    async def _overflow(self, step: DegradeStep,
                        exchange: Exchange) -> web.StreamResponse | None:
        overflow = self.overflow()
        if overflow is None or exchange.overflowed:
            return None
        shed = error_response(429, "overloaded", "rate_limit_exceeded")
        answer = await overflow.handle(exchange, shed)
        if answer is shed:
            return None
        if exchange.info is not None:  # this region's demand, served by a sibling
            self.dispatcher.demand.sent_away(exchange.info.model, self.dispatcher.pool.clock())
        if not answer.prepared:
            answer.headers[DEGRADED_HEADER] = "overflow"
        return self._count(step, answer)

    async def _lighter(self, step: DegradeStep, exchange: Exchange,
                       call_next: Next) -> web.StreamResponse | None:
        """The request as one for the lighter model, if this region may serve it so."""
        info, lighter = exchange.info, step.model
        if info is None or lighter is None or lighter == info.model:
            return None
        if not self._may_serve(exchange, lighter):
            return None
        try:
            body = json.loads(exchange.raw)
        except ValueError:
            return None
        body["model"] = lighter
        asked = exchange.raw, info, dict(exchange.extra_headers)
        exchange.raw = json.dumps(body, separators=(",", ":")).encode()
        exchange.info = self.choose_revision(
            dataclasses.replace(info, model=lighter, revision=None))
        exchange.extra_headers[DEGRADED_HEADER] = f"model={lighter}"
        answer = await call_next(exchange)
        if is_shed(answer) or _unserved(answer):  # the lighter model is full too
            exchange.raw, exchange.info, exchange.extra_headers = asked
            return None
        return self._count(step, answer)

    def _may_serve(self, exchange: Exchange, model: str) -> bool:
        """Whether this region may serve the request as one for ``model``: a server here
        serves it with room now (a full lighter model cannot serve: the next step is
        tried rather than its queue), the tenant may use it, and residency allows the
        client for it."""
        if not any(model in b.models for b in self.dispatcher.pool.backends):
            return False
        if read_signals(self.dispatcher, model).saturation >= 1.0:
            return False
        caller = exchange.caller
        if caller is not None and caller.tenant.models and model not in caller.tenant.models:
            return False
        check, client = self.residency(), exchange.client
        if check is None:
            return True
        if client is None:
            return False  # a policy to check by, and no client checked: never unchecked
        verdict = check.verdict(client.place, client.described, exchange.request.host, model)
        return verdict.allowed

    def _count(self, step: DegradeStep, answer: web.StreamResponse) -> web.StreamResponse:
        self.metrics.degraded.labels((step.model and f"model={step.model}")
                                     or step.action.value).inc()
        return self._served(answer) if step.action is not DegradeAction.SHED else answer

    def _served(self, answer: web.StreamResponse) -> web.StreamResponse:
        if answer.status < 400:
            self.promises.served(self.dispatcher.pool.clock())
        return answer


def _holds(step: DegradeStep, signals: Signals) -> bool | None:
    return None if step.trigger is None else signals.holds(step.trigger, step.threshold)


def _unserved(answer: web.StreamResponse) -> bool:
    """The proxy's own 503 (no server could take the request), not yet sent."""
    return isinstance(answer, web.Response) and not answer.prepared and answer.status == 503
