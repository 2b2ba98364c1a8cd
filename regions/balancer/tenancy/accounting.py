# SPDX-License-Identifier: Apache-2.0
"""Stage: account each answered request of a tenant, once it has ended: the Prometheus
tenant counters (requests, input and output tokens, cancelled, GPU seconds) and a usage
entry (``tenants.usage``, with the id its answer's ``x-request-id`` carried).

A stream cut short without the engine's own count of what it generated is settled later
by the usage reconciler (``signals.usage_reconcile``), which scrapes each engine's
counters; it is told of every request that ends on a backend, a tenant's or not, and its
late tokens are recorded here too (``UsageRecorder.reconciled``).
"""

from __future__ import annotations

import time
from typing import Protocol

from aiohttp import web

from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.relay import RelayEnd
from regions.balancer.http.request_info import host_name
from regions.balancer.scheduling.backend import Backend
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.tenancy.tenant_quota import UsageMeter
from tenants.usage import RECONCILE, UsageEvent, UsageKey, UsageLedger


class Reconciling(Protocol):
    """What the accounting tells the usage reconciler of the requests that ended."""

    active: bool

    def finished(self, backend: Backend, output: int, short: UsageKey | None = None,
                 headroom: int | None = None) -> None: ...

    def untracked(self, name: str | None) -> None: ...


class UsageRecorder:
    """Where usage goes: the tenant counters, and the usage ledger once the shared state
    is attached (``ledger``; None before and without one)."""

    def __init__(self, metrics: BalancerMetrics) -> None:
        self.metrics = metrics
        self.ledger: UsageLedger | None = None

    def reconciled(self, key: UsageKey, tokens: int) -> None:
        """Output tokens an engine generated for ``key``'s cancelled requests after the
        last piece relayed: a ``kind=reconcile`` usage entry and the token counter."""
        self.metrics.tenant(key.tenant, key.model).output_tokens.inc(tokens)
        if self.ledger is not None:
            self.ledger.record(UsageEvent(time.time(), key, 0, tokens, False, 0.0,
                                          kind=RECONCILE))


class Account:
    """Stage: whatever comes back, the ended request is accounted (a tenant's) or told to
    the reconciler (any other)."""

    def __init__(self, region: str, tenancy: Tenancy, pool: BackendPool,
                 recorder: UsageRecorder, reconcile: Reconciling,
                 prefill_ratio: float) -> None:
        self.region = region
        self.tenancy = tenancy
        self.pool = pool
        self.recorder = recorder
        self.reconcile = reconcile
        self.prefill_ratio = prefill_ratio

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        cancelled = True
        try:
            response = await call_next(exchange)
            cancelled = False
            return response
        finally:
            if self.tenancy.enabled:
                self.record(exchange, cancelled)
            elif self.reconcile.active:
                self.reconcile.untracked(exchange.served_by)

    def record(self, exchange: Exchange, cancelled: bool) -> None:
        """Account a tenant's answered request (``tenants.usage``, Prometheus)."""
        info, backend = exchange.admitted, exchange.served_by
        if info is None or backend is None or info.tenant is None:
            self.reconcile.untracked(backend)
            return
        meter = exchange.meter
        usage = meter if isinstance(meter, UsageMeter) else None
        output = meter.output_tokens() if meter is not None else 0
        prompt = usage.prompt_tokens if usage is not None and usage.prompt_tokens is not None \
            else info.prompt_tokens
        end = exchange.relay_end
        # a client that closes after the last piece (SSE clients do, after [DONE]) cancels
        # the handler too: the answer was whole all the same
        whole = end in (RelayEnd.FINISHED, RelayEnd.CLIENT_GONE_AT_END)
        cancelled = not whole and (cancelled or end in (RelayEnd.CLIENT_GONE,
                                                        RelayEnd.CLIENT_STALLED))
        # cut short without the engine's own count: the engine generated more than relayed
        short = not whole and (usage is None or usage.completion_tokens is None)
        served = self.pool.by_name.get(backend)  # gone if a policy change removed it
        gpu_s = self._gpu_seconds(served, prompt, output)
        tenant, model = info.tenant, info.model
        counters = self.recorder.metrics.tenant(tenant, model)
        counters.requests.inc()
        counters.input_tokens.inc(prompt)
        counters.output_tokens.inc(output)
        if cancelled:
            counters.cancelled.inc()
        counters.gpu_seconds.inc(gpu_s)
        key = None
        ledger = self.recorder.ledger
        if ledger is not None or short:
            host = host_name(exchange.request.host)
            service = host if host in self.tenancy.services else "*"
            key = UsageKey(tenant, service, model, self.region, backend)
            if ledger is not None:
                ledger.record(UsageEvent(time.time(), key, prompt, output, cancelled,
                                         gpu_s, exchange.request_id()))
        if served is not None:
            if short:
                limit = info.max_tokens
                self.reconcile.finished(served, output, key,
                                        None if limit is None else limit - output)
            else:
                self.reconcile.finished(served, output)

    def _gpu_seconds(self, served: Backend | None, prompt: int, output: int) -> float:
        """The GPU time a request's work took on ``served``, at its learned speed."""
        if served is None:
            return 0.0
        snap = self.pool.snapshot().backends[served.index]
        if not snap.tokens_per_s:
            return 0.0
        work = prompt / self.prefill_ratio + output
        return work / (snap.tokens_per_s * max(1, snap.cap))
