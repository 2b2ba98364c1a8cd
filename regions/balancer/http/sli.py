# SPDX-License-Identifier: Apache-2.0
"""Stage ``sli``: every answered request counted towards the service level indicators
its model's and tenant's objectives are computed from (``director slo rules``).

- **Availability**: a request is ``ok`` or an ``error``. Errors: a 5xx answer (ours or a
  GPU server's that retries could not hide), a 429 the region shed (its queue, its
  degradation ladder: not a tenant's own quota), a stream that broke off (its server
  failed or went silent and no resume finished it), or an exception. Not counted: 1xx to
  4xx answers other than a shed 429 (the client's doing: a bad body, an unknown model, a
  refused credential or residency, its quota), redirects to a sibling region (the sibling
  counts them), and requests whose client left before the end.
- **TTFT**: a stream's time from arrival here to its first token event.
- **ITL**: a stream's mean time between token events after the first (streams of two or
  more events).

Labels: the model (as served: a lighter model of the ladder is its own) and the tenant
(empty without identity). A request is labelled only once it was parsed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.relay import BROKE_OFF, RelayEnd
from regions.balancer.scheduling.speed import StreamMeter

NOT_COUNTED_ENDS = frozenset({RelayEnd.CLIENT_GONE, RelayEnd.CLIENT_STALLED})


class RecordSli:
    """Stage: the request's SLI events (see the module's docstring)."""

    def __init__(self, metrics: BalancerMetrics, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.clock = clock

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        start = self.clock()
        exchange.meter = StreamMeter()  # a tenant's stage may put its own in its place
        try:
            response = await call_next(exchange)
        except asyncio.CancelledError:  # the client went away
            raise
        except Exception:
            self._count(exchange, "error")
            raise
        status = response.status
        end = exchange.relay_end
        if status >= 500 or (status == 429 and exchange.shed) or end in BROKE_OFF:
            self._count(exchange, "error")
        elif status < 300 and end not in NOT_COUNTED_ENDS:
            self._count(exchange, "ok")
            self._latency(exchange, start)
        return response

    def _count(self, exchange: Exchange, outcome: str) -> None:
        info = exchange.info
        if info is not None:
            self.metrics.slo_requests.labels(info.model, info.tenant or "", outcome).inc()

    def _latency(self, exchange: Exchange, start: float) -> None:
        info, meter = exchange.info, exchange.meter
        if info is None or meter is None or meter.first_at is None:
            return
        labels = (info.model, info.tenant or "")
        self.metrics.slo_ttft.labels(*labels).observe(max(0.0, meter.first_at - start))
        if meter.tokens_after_first > 0 and meter.last_at is not None:
            self.metrics.slo_itl.labels(*labels).observe(
                (meter.last_at - meter.first_at) / meter.tokens_after_first)
