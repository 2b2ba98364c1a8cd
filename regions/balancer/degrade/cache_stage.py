# SPDX-License-Identifier: Apache-2.0
"""Stage: answer a deterministic request from the exact-match cache, or cache its answer.

A service opts in with ``cache <ttl> [max <size>] [tenants ...]`` (``policies.model.
ResponseCache``; ``BalancerConfig.cache`` for every request of a balancer without a
policy). For such a request whose body is deterministic (``cache_key``), the stage looks
the key up in the region's store (``response_store``): a hit is replayed, at the client's
pace for a stream (each event written once the client has taken the one before, as far as
the transport's buffer allows), with a fresh response id and ``x-director-cache: hit``;
nothing goes to a GPU, and no tokens are billed. A miss is forwarded with a capture of
what the client receives (``Exchange.capture``); a whole 200 answer no larger than an
eighth of the bound is stored for ``ttl``.

The key names the tenant, so no tenant is answered from another's entry; it names the
revision the region would serve (the request's, or the set of revisions the region's
servers declare for the model), so a rollout never serves the old revision's answers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiohttp import web

from policies.model import ResponseCache
from regions.balancer.degrade.cache_key import cache_key
from regions.balancer.degrade.response_store import MemoryStore, ResponseStore
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.relay import RelayEnd
from regions.balancer.http.request_info import host_name
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.tenancy.access import Tenancy
from regions.balancer.types import RequestInfo

CACHE_HEADER = "x-director-cache"
ANY_SERVICE = "*"
_ID = re.compile(rb'"id":\s*"([^"]{1,200})"')
SSE = "text/event-stream"


@dataclass
class Capture:
    """What the client was sent of one answer, up to ``limit`` bytes."""

    limit: int
    parts: list[bytes]
    size: int = 0
    overflowed: bool = False

    def __call__(self, piece: bytes) -> None:
        if self.overflowed:
            return
        self.size += len(piece)
        if self.size > self.limit:
            self.overflowed, self.parts = True, []
        else:
            self.parts.append(piece)


class ResponseCacheStage:
    """Stage: the exact-match cache of the services that opt in."""

    def __init__(self, region: str, pool: BackendPool, tenancy: Tenancy,
                 metrics: BalancerMetrics, default: ResponseCache | None = None) -> None:
        self.region = region
        self.pool = pool
        self.tenancy = tenancy  # the policy's services that cache (``Tenancy.caches``)
        self.metrics = metrics
        self.default = default  # every request's, without a policy
        self.store: ResponseStore = MemoryStore()
        self.clock: Callable[[], float] = time.monotonic
        self._storing: set[asyncio.Task[None]] = set()

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        found = self._key(exchange)
        if found is None:
            return await call_next(exchange)
        key, policy = found
        replayed = await self._lookup(exchange, key)
        if replayed is not None:
            return replayed
        self.metrics.cache.labels("miss").inc()
        capture = Capture(max(1, policy.max_bytes // 8), [])
        exchange.add_capture(capture)
        resp = await call_next(exchange)
        if resp.status == 200 and not capture.overflowed and exchange.relay_end in (
                RelayEnd.FINISHED, RelayEnd.CLIENT_GONE_AT_END):
            head = json.dumps({"type": resp.content_type}).encode()
            # its own task: a client that closes after the answer cancels this handler
            task = asyncio.create_task(self._store(key, head + b"\n" + b"".join(capture.parts),
                                                   policy))
            self._storing.add(task)
            task.add_done_callback(self._storing.discard)
        return resp

    async def _store(self, key: str, entry: bytes, policy: ResponseCache) -> None:
        stored = await self.store.put(key, entry, policy.ttl, policy.max_bytes)
        self.metrics.cache.labels("stored" if stored else "not_stored").inc()

    async def hit(self, exchange: Exchange) -> web.StreamResponse | None:
        """The cached answer to ``exchange``, replayed, if there is one (the ladder's
        ``cache`` step)."""
        found = self._key(exchange)
        return await self._lookup(exchange, found[0]) if found is not None else None

    def _key(self, exchange: Exchange) -> tuple[str, ResponseCache] | None:
        info = exchange.info
        found = self._policy(exchange, info)
        if found is None or info is None:
            return None
        service, policy = found
        key = cache_key(exchange.raw, tenant=info.tenant, service=service, model=info.model,
                        revision=self._revision(info), endpoint=info.endpoint.value)
        return (key, policy) if key is not None else None

    async def _lookup(self, exchange: Exchange, key: str) -> web.StreamResponse | None:
        started = self.clock()
        entry = await self.store.get(key)
        if entry is None:
            return None
        replayed = await self._replay(exchange, entry)
        if replayed is not None:
            self.metrics.cache.labels("hit").inc()
            self.metrics.cache_lookup.observe(self.clock() - started)
        return replayed

    def _policy(self, exchange: Exchange,
                info: RequestInfo | None) -> tuple[str, ResponseCache] | None:
        caches: Mapping[str, ResponseCache] = self.tenancy.caches
        if info is None or not (caches or self.default):
            return None
        host = host_name(exchange.request.host)
        policy = caches.get(host)
        service = host
        if policy is None:
            if self.default is None:
                return None
            policy, service = self.default, ANY_SERVICE
        if policy.tenants and info.tenant not in policy.tenants:
            return None
        return service, policy

    def _revision(self, info: RequestInfo) -> str:
        if info.revision is not None:
            return info.revision
        revisions = {b.spec.revision_of(info.model) or "" for b in self.pool.backends
                     if info.model in b.models}
        return ",".join(sorted(revisions))

    async def _replay(self, exchange: Exchange, entry: bytes) -> web.StreamResponse | None:
        """The stored answer, sent as it was (a stream event by event)."""
        head, _, body = entry.partition(b"\n")
        try:
            content_type = str(json.loads(head)["type"])
        except (ValueError, KeyError, TypeError):
            return None
        found = _ID.search(body)
        if found is not None:
            fresh = f"{found.group(1).decode(errors='replace').split('-')[0]}-{uuid.uuid4().hex}"
            body = body.replace(b'"' + found.group(1) + b'"', b'"' + fresh.encode() + b'"')
        headers = {**exchange.extra_headers, CACHE_HEADER: "hit",
                   "x-director-region": self.region}
        if content_type != SSE:
            exchange.relay_end = RelayEnd.FINISHED
            return web.Response(body=body, content_type=content_type, headers=headers)
        resp = web.StreamResponse(headers={**headers, "Content-Type": SSE,
                                           "Cache-Control": "no-cache"})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(exchange.request)
            for event in body.split(b"\n\n"):
                if event:
                    await resp.write(event + b"\n\n")  # waits while the client is behind
            await resp.write_eof()
        except ConnectionError:
            exchange.relay_end = RelayEnd.CLIENT_GONE
            return resp
        exchange.relay_end = RelayEnd.FINISHED
        return resp
