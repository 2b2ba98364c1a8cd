# SPDX-License-Identifier: Apache-2.0
"""The race between a late stream and its hedge (``hedging`` says when and how often).

``HedgeRace.race`` waits for the first body byte of an answer until the learned bound;
when it is late (and the budget, the region's load and the request allow), it binds a
copy to another server of the same model and revision without queueing, sends it, and
waits for whichever of the two sends a body byte first. The loser is closed at once (its
engine aborts the sequence) and its lease released. An answer whose body failed before
its first byte never wins while the other may still answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from regions.balancer.http.hedging import FirstByteBound, HedgeBudget, HedgeSettings
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.relay import UPSTREAM_ERRORS
from regions.balancer.http.upstream import UpstreamResponse
from regions.balancer.http.upstream_pool import UpstreamPool
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import Lease
from regions.balancer.types import RequestInfo

SSE = "text/event-stream"


@dataclass
class Hedged:
    """The hedge won: relay its answer; the first waited ``loser_waited_s`` for nothing."""

    lease: Lease
    info: RequestInfo  # the copy, as bound
    upstream: UpstreamResponse
    sent_at: float
    loser_waited_s: float


class HedgeRace:
    """Hedges late first bytes for one balancer."""

    def __init__(self, settings: HedgeSettings, dispatcher: Dispatcher,
                 upstreams: dict[str, UpstreamPool], metrics: BalancerMetrics,
                 clock: Callable[[], float]) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.upstreams = upstreams
        self.metrics = metrics
        self.clock = clock
        self.bound = FirstByteBound(settings)
        self.budget = HedgeBudget(settings.share, settings.burst)

    def eligible(self, info: RequestInfo) -> bool:
        """Whether ``info`` may be hedged; counts it towards the budget if so."""
        if not self.settings.on or not info.stream or info.priority < self.settings.min_priority:
            return False
        self.budget.earn()
        return True

    async def race(self, info: RequestInfo, lease: Lease, upstream: UpstreamResponse,
                   body: bytes, path: str, headers: Mapping[str, str], sent_at: float,
                   revision: str | None) -> Hedged | None:
        """Wait for ``upstream``'s first body byte; hedge it if late. None: relay
        ``upstream`` (it answered first, or no hedge was sent)."""
        bound = self.bound.seconds(info.prompt_tokens)
        first = upstream.first_piece()
        if bound is None or first.done():
            return None
        await asyncio.wait((first,), timeout=max(0.0, bound - (self.clock() - sent_at)))
        if first.done() and not upstream.failed:
            return None
        pool = self.dispatcher.pool
        if self.dispatcher.queued or pool.snapshot().free_slots <= 0:
            self.metrics.hedges.labels("saturated").inc()
            return None
        if not self.budget.spend():
            self.metrics.hedges.labels("budget").inc()
            return None
        copy = dataclasses.replace(info, revision=revision,
                                   exclude=frozenset({*info.exclude, lease.backend.name}))
        second, _ = self.dispatcher.try_bind(copy)
        if second is None:
            self.budget.tokens += 1.0
            self.metrics.hedges.labels("no_backend").inc()
            return None
        return await self._run(copy, lease, upstream, second, body, path, headers, sent_at)

    async def _run(self, copy: RequestInfo, lease: Lease, upstream: UpstreamResponse,
                   second: Lease, body: bytes, path: str, headers: Mapping[str, str],
                   sent_at: float) -> Hedged | None:
        hedge: UpstreamResponse | None = None
        won = False
        try:
            self.metrics.backend(second.backend.name).decisions.inc()
            hedge_sent = self.clock()
            try:
                hedge = await self.upstreams[second.backend.name].request(
                    "POST", path, headers.items(), body)
            except UPSTREAM_ERRORS:
                self.metrics.hedges.labels("failed").inc()
                return None
            if hedge.status != 200 or hedge.content_type != SSE:
                self.metrics.hedges.labels("failed").inc()
                return None
            first, other = upstream.first_piece(), hedge.first_piece()
            pending: set[asyncio.Future[None]] = {first, other}
            while not other.done():
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if first in done and not upstream.failed:
                    self.metrics.hedges.labels("lost").inc()
                    return None
            won = not hedge.failed
            if not won:
                self.metrics.hedges.labels("failed").inc()
                return None
            self.metrics.hedges.labels("won").inc()
            upstream.close()
            return Hedged(second, copy, hedge, hedge_sent, self.clock() - sent_at)
        finally:
            if not won:
                if hedge is not None:
                    hedge.close()
                second.release()
                self.dispatcher.finished(copy, 0)
