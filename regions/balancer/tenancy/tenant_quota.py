# SPDX-License-Identifier: Apache-2.0
"""A tenant's quotas at this balancer: checked once its request is parsed, charged as the
answer streams, settled when it ends (``tenants.quota.QuotaGate`` on the shared state).

Input tokens are charged at admission on ``RequestInfo.prompt_tokens`` (estimated from the
prompt's size; a client's ``x_prompt_tokens`` may raise it, never lower it) and settled by
``finish`` with the engine's ``usage.prompt_tokens`` when the answer has one.

``admit`` refuses over quota with 429 (OpenAI's ``rate_limit_exceeded`` body, ``Retry-After``
from the tenant's bucket and the ``x-ratelimit-*`` headers) or, for a ``redis-down closed``
tenant while the state is unreachable, with 503; an admitted request's ``RequestQuota``
stays with the ``AdmitTenant`` stage, whose meter (the exchange's) the proxy feeds with the
answer's chunks.
Output tokens are charged about once a second while a stream runs (one task for every
running request of output-limited tenants, not one each) and settled by ``finish`` with the
answer's own ``usage`` when it has one, else the token events counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from aiohttp import web

from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.scheduling.speed import StreamMeter
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.types import RequestInfo
from state.aio import AsyncStateStore
from tenants.identify import Identified
from tenants.quota import Admission, QuotaGate
from tenants.quota_link import DEFAULT_MAX_TIMEOUT_S, DEFAULT_TIMEOUT_S

log = logging.getLogger(__name__)

CHARGE_EVERY_S = 1.0
MAX_BODY_SCAN = 256 * 1024  # a non-streamed answer's body is read for its usage up to this


class UsageMeter(StreamMeter):
    """A ``StreamMeter`` that also reads the answer's ``usage`` (the last SSE chunk's when
    the client asked for it, a JSON body's otherwise)."""

    __slots__ = ("_body", "completion_tokens", "prompt_tokens")

    def __init__(self) -> None:
        super().__init__()
        self.completion_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self._body = bytearray()

    def observe(self, chunk: bytes, now: float) -> None:
        super().observe(chunk, now)
        if b'"usage":{' in chunk or b'"usage": {' in chunk:
            for line in chunk.split(b"\n"):
                if line.startswith(b"data:") and b'"usage"' in line:
                    self._read_usage(line[5:])

    def body(self, chunk: bytes) -> None:
        if len(self._body) + len(chunk) <= MAX_BODY_SCAN:
            self._body += chunk

    def output_tokens(self) -> int:
        if self.completion_tokens is None and self._body:
            self._read_usage(bytes(self._body))
        return self.completion_tokens if self.completion_tokens is not None else self.events

    def _read_usage(self, text: bytes) -> None:
        try:
            usage = json.loads(text).get("usage")
        except (ValueError, AttributeError):
            return
        if isinstance(usage, dict):
            completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
            if isinstance(completion, int):
                self.completion_tokens = completion
            if isinstance(prompt, int):
                self.prompt_tokens = prompt




@dataclass(eq=False)
class RequestQuota:
    admission: Admission
    meter: UsageMeter = field(default_factory=UsageMeter)
    charged: int = 0


class TenantQuotas:
    """The quota checks of one balancer; inactive until the shared state is attached."""

    def __init__(self, local_share: float = 1.0,
                 on_refused: Callable[[str, int, str | None], None] | None = None) -> None:
        self.local_share = local_share
        self.gate: QuotaGate | None = None
        self.on_refused = on_refused  # (tenant, status, limit) of each refusal
        self._streaming: set[RequestQuota] = set()  # output-limited, charged as they stream
        self._ticker: asyncio.Task[None] | None = None
        self._ids = RequestIds()

    def attach(self, store: AsyncStateStore, wait_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Check quotas in ``store``, waiting at least ``wait_s`` for each of its answers."""
        self.gate = QuotaGate(store.client, store.keys.prefix, local_share=self.local_share,
                              timeout_s=wait_s,
                              max_timeout_s=max(wait_s, DEFAULT_MAX_TIMEOUT_S))

    async def close(self) -> None:
        """Give the budget slices the gate holds back to the shared state."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self.gate is not None:
            await self.gate.aclose()

    async def admit(self, who: Identified,
                    info: RequestInfo) -> RequestQuota | web.Response | None:
        """The request's ``RequestQuota`` (None: the tenant has no quota here), or the
        refusal."""
        quota = who.tenant.quota
        if self.gate is None or not any((
                quota.requests_per_minute, quota.input_tokens_per_minute,
                quota.output_tokens_per_minute, quota.concurrent)):
            return None
        admission = await self.gate.admit(
            who.tenant.name, quota, who.tenant.redis_down, input_tokens=info.prompt_tokens,
            max_output_tokens=info.max_tokens, request_id=self._ids.next())
        if not admission.allowed:
            if self.on_refused is not None:
                self.on_refused(who.tenant.name, admission.status, admission.limit)
            unavailable = admission.status == 503
            message = ("The shared state is unreachable and this tenant fails closed."
                       if unavailable else f"Rate limit reached for tenant "
                       f"'{who.tenant.name}' on {admission.limit}. Retry after "
                       f"{admission.retry_after_s:.1f} s.")
            body = {"error": {"message": message,
                              "type": "service_unavailable" if unavailable else "requests",
                              "param": None, "code": "service_unavailable" if unavailable
                              else "rate_limit_exceeded"}}
            return web.json_response(body, status=admission.status, headers=admission.headers)
        held = RequestQuota(admission)
        if quota.output_tokens_per_minute:
            self._streaming.add(held)
            if self._ticker is None or self._ticker.done():
                self._ticker = asyncio.create_task(self._charge_while_streaming())
        return held

    async def finish(self, held: RequestQuota) -> None:
        """Settle the request's output tokens, and its input tokens with the engine's count
        when the answer gave one (the admission charged an estimate), and release its
        concurrency slot."""
        self._streaming.discard(held)
        output = held.meter.output_tokens()  # reads a whole body's usage, prompt's too
        await held.admission.finish(output, input_tokens=held.meter.prompt_tokens)

    async def _charge_while_streaming(self) -> None:
        """Every ``CHARGE_EVERY_S``, charge each running output-limited request what it
        streamed since; ends when none is left."""
        while self._streaming:
            await asyncio.sleep(CHARGE_EVERY_S)
            for held in list(self._streaming):
                streamed = held.meter.events
                if streamed > held.charged and held in self._streaming:
                    fresh, held.charged = streamed - held.charged, streamed
                    try:
                        await held.admission.charge_output(fresh)
                    except Exception:  # one request's charge never stops the others'
                        log.exception("charging a stream's output tokens failed")


class RequestIds:
    """Ids for concurrency leases, unique across balancers: a random prefix per process
    (drawn again in a forked child) and a counter."""

    def __init__(self) -> None:
        self._pid = -1
        self._prefix = ""
        self._count = itertools.count()

    def next(self) -> str:
        if self._pid != os.getpid():
            self._pid, self._prefix = os.getpid(), uuid.uuid4().hex[:16]
        return f"{self._prefix}-{next(self._count)}"


class AdmitTenant:
    """Stage: a tenant's request as its tenant sends it (its name, its priority tier, which
    a priority header may only lower), or 403 for a model it may not use, or the quota's
    refusal; its quota settled when the answer ends. A request of no tenant passes on."""

    def __init__(self, tenancy: Tenancy, quotas: TenantQuotas) -> None:
        self.tenancy = tenancy
        self.quotas = quotas

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        who, info = exchange.caller, exchange.info
        if who is None or info is None:
            return await call_next(exchange)
        refusal = self.tenancy.model_refusal(who, info.model)
        if refusal is not None:
            return refusal
        held = await self.quotas.admit(who, info)
        if isinstance(held, web.Response):
            return held
        # the fair share and the usage settle with the answer's output tokens, and the
        # engine's exact counts are asked for
        exchange.meter = held.meter if held is not None else UsageMeter()
        exchange.ask_usage = True
        # the answer names the id its usage entry carries
        exchange.extra_headers = {**exchange.extra_headers,
                                  **(held.admission.headers if held is not None else {}),
                                  "x-request-id": exchange.request_id()}
        exchange.info = replace(info, tenant=who.tenant.name,
                                priority=who.tenant.priority + min(0, info.priority))
        try:
            return await call_next(exchange)
        finally:
            if held is not None:
                await self.quotas.finish(held)
