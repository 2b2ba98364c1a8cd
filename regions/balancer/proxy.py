# SPDX-License-Identifier: Apache-2.0
"""The data path of one inference request: parse, bind, forward, stream back, account.

1. The body is read once (bounded: 413 above ``max_body_bytes``, 408 when it pauses longer
   than ``client_body_s``) and parsed once into a ``RequestInfo``.
2. ``Dispatcher.acquire`` binds it to a backend (maybe after waiting in the queue) and
   returns a ``Lease``; the lease is released by a ``with`` block however the request
   ends: success, upstream error, client disconnect (the handler is cancelled) or timeout.
3. Before the first byte, a connection failure or a 502/503 answer is retried on another
   backend (``max_retries``); the failed backend is excluded for this request and its
   error counted towards outlier ejection.
4. The response is relayed chunk by chunk as it arrives (``StreamResponse``, no
   buffering). SSE chunks are metered to learn the backend's decode rate, after each is
   written on: the accounting never delays a chunk. If the client goes away the handler
   is cancelled and the upstream connection is closed, which aborts the sequence on the
   GPU server; a client that stops reading is cut after ``client_stall_s`` without
   progress, the same way (``relay``), and counted.
5. The first byte of a 200 answer gives the backend a TTFT sample, timed from sending it
   to that backend (not from the request's arrival: queueing here and earlier attempts are
   not the backend's); ``BackendPool.record_ttft`` may eject it as a TTFT outlier (if
   the backend was not busy when the request was bound: ``Lease.occupancy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web

from regions.balancer.admission import Dispatcher
from regions.balancer.backends import Backend, BackendPool, Lease
from regions.balancer.client_timeouts import BodyTimeout, read_body
from regions.balancer.engine_priority import with_priority
from regions.balancer.errors import NoBackendError, RequestRejected, ShedError
from regions.balancer.headers import upstream_request_headers
from regions.balancer.kv_event_index import DEFAULT_KV_BLOCK_SIZE, KvEventIndex
from regions.balancer.metrics import BalancerMetrics
from regions.balancer.output_lengths import OutputLengths
from regions.balancer.relay import (
    DEFAULT_STALL_S,
    UPSTREAM_ERRORS,
    RelayEnd,
    relay,
    response_for,
)
from regions.balancer.request_info import parse_request
from regions.balancer.speed import StreamMeter
from regions.balancer.types import Endpoint, RequestInfo
from regions.balancer.upstream import UpstreamPool, UpstreamResponse
from regions.balancer.usage_stream import UsageEventFilter, ask_for_usage

WHOLE_ANSWER = (RelayEnd.FINISHED, RelayEnd.CLIENT_GONE_AT_END)
METER = web.RequestKey("director.meter", StreamMeter)  # a meter of the caller's, if any
EXTRA_HEADERS = web.RequestKey("director.extra_headers", dict)  # added to the answer
ASK_USAGE = web.RequestKey("director.ask_usage", bool)  # get the engine's usage of a stream
SERVED_BY = web.RequestKey("director.served_by", str)  # the backend that answered
RELAY_END = web.RequestKey("director.relay_end", RelayEnd)  # how the answer ended
CLIENT_GONE = {RelayEnd.CLIENT_GONE: "before_end", RelayEnd.CLIENT_GONE_AT_END: "at_end"}
REGION_HEADER = "x-director-region"
BACKEND_HEADER = "x-director-backend"
QUEUE_HEADER = "x-director-queue-ms"  # admitted to sent upstream: the region queue, retries
DEADLINE_HEADER = "x-director-deadline-ms"
RETRYABLE_STATUS = frozenset({502, 503})
MAX_ERROR_BODY = 64 * 1024

log = logging.getLogger(__name__)


def error_response(
    status: int,
    message: str,
    error_type: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return web.json_response(body, status=status, headers=headers)


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    region: str
    max_body_bytes: int
    max_retries: int
    prefill_ratio: float
    max_queue_wait_s: float
    prefix_hashes: bool = False  # hash the prompt's leading blocks (a scorer reads them)
    client_stall_s: float = DEFAULT_STALL_S  # an answer its client takes nothing of: cut
    client_body_s: float = 30.0  # a request body that pauses longer: 408
    kv_index: KvEventIndex | None = None  # key the prompt's token blocks for this index


class Proxy:
    """Forwards inference requests for one balancer."""

    def __init__(
        self,
        settings: ProxySettings,
        pool: BackendPool,
        dispatcher: Dispatcher,
        metrics: BalancerMetrics,
        upstreams: dict[str, UpstreamPool],
        clock: Callable[[], float],
        admit: Callable[[web.Request, RequestInfo], Awaitable[RequestInfo | web.Response]]
        | None = None,
    ) -> None:
        self.settings = settings
        self.admit = admit  # the request as its tenant sends it, or the refusal (model, quota)
        self.pool = pool
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.upstreams = upstreams
        self.clock = clock
        self.output_lengths = OutputLengths()

    # -- parsing -------------------------------------------------------------------------

    async def read_request(
        self, request: web.Request, endpoint: Endpoint
    ) -> tuple[bytes, RequestInfo]:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise RequestRejected(413, f"request body exceeds {limit} bytes")
        try:
            raw = await read_body(request, self.settings.client_body_s)
        except web.HTTPRequestEntityTooLarge:
            raise RequestRejected(413, f"request body exceeds {limit} bytes") from None
        except BodyTimeout as exc:
            self.metrics.slow_requests.labels("body").inc()
            raise RequestRejected(408, str(exc)) from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestRejected(400, "request body is not valid JSON") from None
        info = parse_request(
            endpoint,
            body,
            request.headers,
            prefill_ratio=self.settings.prefill_ratio,
            lengths=self.output_lengths,
            with_prefix=self.settings.prefix_hashes,
            token_block_size=self.token_block_size(),
        )
        return raw, info

    def token_block_size(self) -> int | None:
        """The block size to key the prompt's tokens by, while some backend's KV events
        are followed exactly (as its events say; vLLM's 16 until they say)."""
        index = self.settings.kv_index
        if index is None or not index.exact_backends:
            return None
        return index.block_size or DEFAULT_KV_BLOCK_SIZE

    def queue_timeout(self, request: web.Request) -> float:
        raw = request.headers.get(DEADLINE_HEADER)
        limit = self.settings.max_queue_wait_s
        if raw is None:
            return limit
        try:
            return max(0.0, min(limit, int(raw) / 1000.0))
        except ValueError:
            raise RequestRejected(400, f"{DEADLINE_HEADER}: expected milliseconds") from None

    # -- forwarding ----------------------------------------------------------------------

    async def handle(self, request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
        try:
            raw, info = await self.read_request(request, endpoint)
            timeout = self.queue_timeout(request)
        except RequestRejected as exc:
            error_type = "invalid_request_error"
            refusal = error_response(exc.status, exc.message, error_type, param=exc.param)
            if exc.status == 408:  # the rest of a stalled body is not waited for
                refusal.force_close()
            return refusal
        if self.admit is not None:
            admitted = await self.admit(request, info)
            if isinstance(admitted, web.StreamResponse):
                return admitted
            info = admitted
        strip_usage = False
        if info.stream and request.get(ASK_USAGE):
            asked = ask_for_usage(raw)
            if asked is not None:
                raw, strip_usage = asked, True
        start = self.clock()
        path = request.rel_url.path_qs
        headers = upstream_request_headers(request.headers)
        excluded: set[str] = set()
        last_failure: web.Response | None = None
        for attempt in range(self.settings.max_retries + 1):
            if attempt:
                self.metrics.retries.inc()
            attempt_info = (
                dataclasses.replace(info, exclude=frozenset(excluded)) if excluded else info
            )
            try:
                lease = await self.dispatcher.acquire(attempt_info, timeout)
            except NoBackendError as exc:
                if last_failure is not None:
                    return last_failure
                status = 404 if exc.stage == "model" else 503
                kind = "model_not_found" if status == 404 else "service_unavailable"
                return error_response(status, exc.message, kind)
            except ShedError as exc:
                self.metrics.shed.labels(exc.reason).inc()
                return error_response(
                    429,
                    str(exc),
                    "rate_limit_exceeded",
                    headers={"Retry-After": str(exc.retry_after)},
                )
            with lease, self._finishing(request, attempt_info):
                backend = lease.backend
                self.metrics.backend(backend.name).decisions.inc()
                pool = self.upstreams[backend.name]
                sent_at = self.clock()
                try:
                    body = (with_priority(raw, attempt_info.priority)
                            if backend.spec.priority_scheduling else raw)
                    upstream = await pool.request("POST", path, headers.items(), body)
                except UPSTREAM_ERRORS as exc:
                    self._failed(backend, "connect")
                    excluded.add(backend.name)
                    last_failure = error_response(
                        502,
                        f"backend {backend.name} unreachable: {type(exc).__name__}",
                        "bad_gateway",
                    )
                    continue
                if upstream.status in RETRYABLE_STATUS and attempt < self.settings.max_retries:
                    last_failure = await self._consume_failure(upstream, backend)
                    excluded.add(backend.name)
                    continue
                return await self._relay(request, upstream, lease, info, start, sent_at,
                                         strip_usage)
        return last_failure or error_response(502, "no backend answered", "bad_gateway")

    @contextlib.contextmanager
    def _finishing(self, request: web.Request, info: RequestInfo) -> Iterator[None]:
        """Tell the dispatcher how a tenant's bound request ended (its fair share)."""
        try:
            yield
        finally:
            if info.tenant is not None:
                meter = request.get(METER)
                produced = meter.output_tokens() if meter is not None else 0
                self.dispatcher.finished(info, produced)

    async def _consume_failure(
        self, upstream: UpstreamResponse, backend: Backend
    ) -> web.Response:
        try:
            body = await upstream.read(MAX_ERROR_BODY)
        except UPSTREAM_ERRORS:
            body = b""
        finally:
            upstream.close()
        self._failed(backend, f"http_{upstream.status}")
        return web.Response(
            status=upstream.status,
            body=body,
            content_type=upstream.content_type or "application/json",
            headers={REGION_HEADER: self.settings.region, BACKEND_HEADER: backend.name},
        )

    def _failed(self, backend: Backend, kind: str) -> None:
        self.metrics.upstream_errors.labels(backend.name, kind).inc()
        if self.pool.record_failure(backend):
            self.metrics.ejections.labels(backend.name).inc()

    async def _relay(
        self,
        request: web.Request,
        upstream: UpstreamResponse,
        lease: Lease,
        info: RequestInfo,
        start: float,
        sent_at: float,
        strip_usage: bool = False,
    ) -> web.StreamResponse:
        backend = lease.backend
        request[SERVED_BY] = backend.name
        metrics = self.metrics.backend(backend.name)
        resp = response_for(
            upstream, {**request.get(EXTRA_HEADERS, {}), REGION_HEADER: self.settings.region,
                       BACKEND_HEADER: backend.name,
                       QUEUE_HEADER: str(round((sent_at - start) * 1000))}
        )
        sse = upstream.content_type == "text/event-stream"
        meter = request.get(METER) or StreamMeter()
        first = True

        def on_chunk(chunk: bytes, now: float) -> None:
            nonlocal first
            if first:  # the backend's first byte, even if the client left
                first = False
                lease.started()
                metrics.ttft.observe(now - start)
                if upstream.status == 200:
                    self._ttft(backend, now - sent_at, lease.occupancy)
            if sse:
                meter.observe(chunk, now)
            else:
                meter.body(chunk)

        try:
            end = await relay(request, upstream, resp, on_chunk, self.clock,
                              UsageEventFilter() if strip_usage and sse else None,
                              self.settings.client_stall_s)
            request[RELAY_END] = end
        except asyncio.CancelledError:  # the client went away while we waited upstream
            self.metrics.client_gone.labels("before_end").inc()
            raise
        if end is RelayEnd.UPSTREAM_FAILED:
            self._failed(backend, "mid_stream")
        elif end in CLIENT_GONE:
            self.metrics.client_gone.labels(CLIENT_GONE[end]).inc()
            log.debug("client went away (%s) from a %s answer", CLIENT_GONE[end], backend.name)
        elif end is RelayEnd.CLIENT_STALLED:
            self.metrics.stalled_clients.inc()
            log.debug("client %s cut: it took nothing of a %s answer for %.0f s",
                     request.remote, backend.name, self.settings.client_stall_s)
        if end not in WHOLE_ANSWER:
            return resp
        metrics.e2e.observe(self.clock() - start)
        if upstream.status >= 500:
            self._failed(backend, f"http_{upstream.status}")
        else:
            self.pool.record_success(backend)
            if upstream.status == 200:
                self._learn(lease, info, meter)
        return resp

    def _ttft(self, backend: Backend, seconds: float, occupancy: float) -> None:
        average = backend.ttft  # an ejection replaces it with a fresh one
        if self.pool.record_ttft(backend, seconds, occupancy):
            self.metrics.ejections.labels(backend.name).inc()
            log.warning(
                "backend %s ejected: its time to first token (EWMA %.3f s) is far "
                "above the region's",
                backend.name,
                average.value or seconds,
            )

    def _learn(self, lease: Lease, info: RequestInfo, meter: StreamMeter) -> None:
        rate = meter.rate()
        if rate is not None:
            self.pool.record_stream(lease, rate)
        if meter.events:
            self.output_lengths.observe(
                info.model, info.prompt_tokens, info.max_tokens, meter.events
            )
