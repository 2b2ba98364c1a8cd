# SPDX-License-Identifier: Apache-2.0
"""The data path of one inference request: parse, bind, forward, stream back, account.

1. The body is read once (bounded: 413 above ``max_body_bytes``, 408 when it pauses longer
   than ``client_body_s``) and parsed once into a ``RequestInfo``.
2. ``Dispatcher.acquire`` binds it to a backend (maybe after waiting in the queue) and
   returns a ``Lease``; the lease is released by a ``with`` block however the request
   ends: success, upstream error, client disconnect (the handler is cancelled) or timeout.
3. Before the first byte, a connection failure or a 500, 502 or 503 answer is retried on
   another backend (``max_retries``); the failed backend is excluded for this request and
   its error counted towards outlier ejection (and, for a declared revision, towards that
   revision's error rate: a rollout still sees a bad revision's 500s that clients do not).
   When every server of the request's revision has failed it, the retry may go to any
   revision of the model.
   An inference request changes nothing on the server, so sending it again is safe; a 500
   is what a broken revision or a crashing engine answers, and the retry is what keeps it
   from reaching the client. Other statuses (4xx: the request's own fault) pass through.
4. The response is relayed chunk by chunk as it arrives (``StreamResponse``, no
   buffering). SSE chunks are metered to learn the backend's decode rate, after each is
   written on: the accounting never delays a chunk. If the client goes away the handler
   is cancelled and the upstream connection is closed, which aborts the sequence on the
   GPU server; a client that stops reading is cut after ``client_stall_s`` without
   progress, the same way (``relay``), and counted.
5. A stream whose upstream goes silent mid-answer for longer than the backend's learned
   bound (``silence_bound``), or whose upstream connection fails mid-answer, is resumed on
   another server of the same model and revision: the engine is sent the prompt plus what
   was already streamed (``continuation``) and its answer is spliced into the client's
   stream (``stream_tap``), at most ``max_resumes`` continuations (servers that refuse or
   cannot be reached count towards ``max_retries`` instead). When it cannot be (the answer
   began a tool call, no server can take it, the engine refuses), an error event ends the
   stream.
6. A stream whose first body byte is late (``hedging``: off by default) may get a copy on
   another server; the first to answer is relayed, the other closed (``hedge_race``).
7. The first byte of a 200 answer gives the backend a TTFT sample, timed from sending it
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
from collections.abc import Callable, Iterator, Mapping

from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from regions.balancer.errors import NoBackendError, ShedError
from regions.balancer.http.continuation import NotResumable, continuation
from regions.balancer.http.engine_priority import with_priority
from regions.balancer.http.exchange import Exchange
from regions.balancer.http.headers import upstream_request_headers
from regions.balancer.http.hedge_race import HedgeRace
from regions.balancer.http.hedging import HedgeSettings
from regions.balancer.http.metrics import BalancerMetrics
from regions.balancer.http.refusals import error_response
from regions.balancer.http.relay import (
    BROKE_OFF,
    DEFAULT_STALL_S,
    UPSTREAM_ERRORS,
    RelayEnd,
    end_open_answer,
    relay,
    response_for,
)
from regions.balancer.http.request_trace import (
    NO_SPAN,
    TRACEPARENT,
    NoSpan,
    RequestTrace,
    UpstreamSpan,
)
from regions.balancer.http.revision_outcomes import RevisionOutcomes
from regions.balancer.http.silence_bound import SilenceBounds, SilenceSettings
from regions.balancer.http.stream_tap import StreamTap
from regions.balancer.http.upstream import UpstreamResponse
from regions.balancer.http.upstream_pool import UpstreamPool
from regions.balancer.http.usage_stream import UsageEventFilter, ask_for_usage
from regions.balancer.scheduling.admission import Dispatcher
from regions.balancer.scheduling.backend import Backend, Lease
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.output_lengths import OutputLengths
from regions.balancer.scheduling.speed import StreamMeter
from regions.balancer.types import Endpoint, RequestInfo
from telemetry import genai

WHOLE_ANSWER = (RelayEnd.FINISHED, RelayEnd.CLIENT_GONE_AT_END)
CLIENT_GONE = {RelayEnd.CLIENT_GONE: "before_end", RelayEnd.CLIENT_GONE_AT_END: "at_end"}
REGION_HEADER = "x-director-region"
BACKEND_HEADER = "x-director-backend"
REVISION_HEADER = "x-director-revision"  # of the model, as the serving backend declares it
QUEUE_HEADER = "x-director-queue-ms"  # admitted to sent upstream: the region queue, retries
RETRYABLE_STATUS = frozenset({500, 502, 503})
RESUMABLE = frozenset({Endpoint.CHAT, Endpoint.COMPLETIONS})
RESUMABLE_ENDS = BROKE_OFF  # how a resumable stream may break off mid-answer
MAX_ERROR_BODY = 64 * 1024

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    region: str
    max_retries: int
    client_stall_s: float = DEFAULT_STALL_S  # an answer its client takes nothing of: cut
    max_resumes: int = 2  # continuations of one stream whose upstreams went silent; 0: off
    silence: SilenceSettings = dataclasses.field(default_factory=SilenceSettings)
    hedge: HedgeSettings = dataclasses.field(default_factory=HedgeSettings)


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
        output_lengths: OutputLengths,
        outcomes: RevisionOutcomes | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.upstreams = upstreams
        self.clock = clock
        self.output_lengths = output_lengths  # learned here, read by parsing
        self.outcomes = outcomes or RevisionOutcomes()  # by declared revision, for rollouts
        self.silences = SilenceBounds(settings.silence)
        self.hedging = HedgeRace(settings.hedge, dispatcher, upstreams, metrics, clock)

    # -- forwarding ----------------------------------------------------------------------

    async def forward(self, exchange: Exchange) -> web.StreamResponse:
        """The last stage: bind the parsed request to a backend, send it, relay the answer
        (retried on another backend before its first byte, ``max_retries`` times)."""
        info, raw = exchange.info, exchange.raw
        assert info is not None, "forwarded before it was parsed"
        strip_usage = False
        if info.stream and exchange.ask_usage:
            asked = ask_for_usage(raw)
            if asked is not None:
                raw, strip_usage = asked, True
        start = self.clock()
        path = exchange.request.rel_url.path_qs
        headers = upstream_request_headers(exchange.request.headers)
        trace = exchange.trace
        if exchange.traceparent is not None:
            headers[TRACEPARENT] = exchange.traceparent
        excluded: set[str] = set()
        last_failure: web.Response | None = None
        tap = StreamTap() if (info.stream and self.settings.max_resumes
                              and info.endpoint in RESUMABLE) else None
        self.dispatcher.demand.arrived(info.model, start, borrowed=exchange.overflowed)
        hedged = self.hedging.eligible(info)
        for attempt in range(self.settings.max_retries + 1):
            if attempt:
                self.metrics.retries.inc()
                if trace is not None:
                    trace.set("director.retries", attempt)
            try:
                lease, info = await self._bind(info, excluded, exchange.queue_timeout_s,
                                               trace)
            except (NoBackendError, ShedError) as exc:
                return last_failure or self._unbound(exc, exchange)
            exchange.bound.append(lease.backend.name)
            with lease, self._finishing(exchange, info), \
                    _calling(trace, lease.backend, path, headers) as call:
                backend = lease.backend
                self.metrics.backend(backend.name).decisions.inc()
                sent_at = self.clock()
                try:
                    body = (with_priority(raw, info.priority)
                            if backend.spec.priority_scheduling else raw)
                    upstream = await self.upstreams[backend.name].request(
                        "POST", path, headers.items(), body)
                except UPSTREAM_ERRORS as exc:
                    self._failed(backend, "connect")
                    self._count_failure(exchange, backend, 502)
                    excluded.add(backend.name)
                    call.answered(502)
                    last_failure = error_response(
                        502, f"backend {backend.name} unreachable: {type(exc).__name__}",
                        "bad_gateway")
                    continue
                call.answered(upstream.status)
                if upstream.status in RETRYABLE_STATUS and attempt < self.settings.max_retries:
                    last_failure = await self._consume_failure(exchange, upstream, backend)
                    excluded.add(backend.name)
                    continue
                hedge = await self.hedging.race(
                    info, lease, upstream, body, path, headers, sent_at,
                    _revision_of(exchange, backend)) if hedged and upstream.status == 200 \
                    else None
                if hedge is None:
                    resp = await self._relay(exchange, upstream, lease, start, sent_at,
                                             strip_usage, tap)
                else:
                    if trace is not None:
                        trace.set("director.hedge", f"{backend.name} lost to "
                                                    f"{hedge.lease.backend.name}")
                    self._ttft(backend, hedge.loser_waited_s, lease.occupancy)  # at least
                    lease.release()
                    backend = hedge.lease.backend
                    exchange.bound.append(backend.name)
                    with hedge.lease:
                        resp = await self._relay(exchange, hedge.upstream, hedge.lease, start,
                                                 hedge.sent_at, strip_usage, tap)
                    self.dispatcher.finished(hedge.info, 0)  # its tokens are counted above
                call.ended(exchange.relay_end)
            if exchange.relay_end not in RESUMABLE_ENDS or tap is None:
                return resp
            excluded.add(backend.name)
            resumed = _Resume(resp, tap, path, headers, raw, strip_usage,
                              _revision_of(exchange, backend))
            return await self._resume(exchange, resumed, info, excluded)
        return last_failure or error_response(502, "no backend answered", "bad_gateway")

    async def _resume(self, exchange: Exchange, resumed: _Resume, info: RequestInfo,
                      excluded: set[str]) -> web.StreamResponse:
        """Continue a stream whose upstream went silent on another server of its model
        and revision, spliced into the client's open answer; an error event ends it when
        that cannot be done."""
        request, resp = exchange.request, resumed.resp
        pinned = dataclasses.replace(info, revision=resumed.revision)
        resumes = retries = 0  # continuations sent; servers that would not take one
        while resumes < self.settings.max_resumes:
            delivered = resumed.tap.delivered()
            if delivered is None:
                return await self._give_up(exchange, resp, "unreadable",
                                           "the answer so far could not be read")
            if delivered.finish is not None:  # every token went out: only its end is missing
                self.metrics.resumes.labels("ended", "").inc()
                exchange.relay_end = await end_open_answer(
                    request, resp, b"data: [DONE]\n\n", self.settings.client_stall_s)
                return resp
            try:
                body = continuation(info.endpoint, resumed.raw, delivered)
            except NotResumable as exc:
                return await self._give_up(exchange, resp, "not_resumable", str(exc))
            bound = dataclasses.replace(pinned, exclude=frozenset(excluded))
            try:
                lease = await self.dispatcher.acquire(bound, exchange.queue_timeout_s)
            except (NoBackendError, ShedError) as exc:
                return await self._give_up(exchange, resp, "no_backend", str(exc))
            exchange.bound.append(lease.backend.name)
            before = exchange.meter.output_tokens() if exchange.meter is not None else 0
            with lease, self._finishing(exchange, bound, before):
                backend = lease.backend
                excluded.add(backend.name)
                try:
                    sent = (with_priority(body, info.priority)
                            if backend.spec.priority_scheduling else body)
                    upstream = await self.upstreams[backend.name].request(
                        "POST", resumed.path, resumed.headers.items(), sent)
                except UPSTREAM_ERRORS:
                    self._failed(backend, "connect")
                    retries += 1
                    if retries > self.settings.max_retries:
                        return await self._give_up(exchange, resp, "unreachable",
                                                   "no server could be reached")
                    continue
                if upstream.status != 200 or upstream.content_type != "text/event-stream":
                    failure = await self._consume_failure(exchange, upstream, backend)
                    retries += 1
                    if upstream.status in RETRYABLE_STATUS and \
                            retries <= self.settings.max_retries:
                        continue
                    return await self._give_up(exchange, resp, "refused", (
                        f"{backend.name} refused to continue the answer "
                        f"({failure.status}): {(failure.text or '')[:200]}"))
                resumes += 1
                if exchange.trace is not None:
                    exchange.trace.set("director.resumes", resumes)
                    exchange.trace.event("director.resume", backend=backend.name,
                                         delivered_tokens=delivered.tokens)
                resumed.tap.splice(delivered)
                exchange.served_by = backend.name
                end = await self._relay_more(exchange, resumed, upstream, lease)
            if end not in RESUMABLE_ENDS:
                self.metrics.resumes.labels(
                    "resumed" if end in WHOLE_ANSWER else "client_gone", "").inc()
                return resp
        return await self._give_up(exchange, resp, "attempts",
                                   f"the answer broke off {resumes + 1} times")

    async def _relay_more(self, exchange: Exchange, resumed: _Resume,
                          upstream: UpstreamResponse, lease: Lease) -> RelayEnd:
        """Relay a continuation into the client's open answer."""
        meter = exchange.meter or StreamMeter()
        started = False

        def on_chunk(chunk: bytes, now: float) -> None:
            nonlocal started
            if not started:
                started = True
                lease.started()
            meter.observe(chunk, now)

        backend = lease.backend
        silence = self.silences.of(backend.name)
        end = await relay(exchange.request, upstream, resumed.resp, on_chunk, self.clock,
                          UsageEventFilter() if resumed.strip_usage else None,
                          self.settings.client_stall_s, tap=resumed.tap,
                          silence_s=silence.seconds(), prepared=True, gaps=silence.observe,
                          capture=exchange.capture)
        exchange.relay_end = end
        self._count_end(end, backend, exchange.request)
        if end in WHOLE_ANSWER:
            self.pool.record_success(backend)
        return end

    async def _give_up(self, exchange: Exchange, resp: web.StreamResponse, reason: str,
                       message: str) -> web.StreamResponse:
        """End an open answer that cannot be continued with an error event."""
        self.metrics.resumes.labels("failed", reason).inc()
        if exchange.trace is not None:
            exchange.trace.event("director.resume_failed", reason=reason)
        log.warning("a stalled stream could not be resumed: %s", message)
        event = {"error": {"message": f"the answer stalled and could not be resumed: {message}",
                           "type": "server_error", "code": "stream_stalled"}}
        tail = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        exchange.relay_end = await end_open_answer(exchange.request, resp, tail,
                                                   self.settings.client_stall_s)
        if exchange.relay_end is RelayEnd.FINISHED:
            exchange.relay_end = RelayEnd.UPSTREAM_FAILED  # an error ended it
        return resp

    async def _bind(self, info: RequestInfo, excluded: set[str], timeout_s: float,
                    trace: RequestTrace | None = None) -> tuple[Lease, RequestInfo]:
        """``_bind_any``, in a ``director.queue`` span when the request is traced."""
        if trace is None:
            return await self._bind_any(info, excluded, timeout_s)
        explained = self.dispatcher.explain(
            dataclasses.replace(info, exclude=frozenset(excluded)) if excluded else info)
        started = self.clock()
        with trace.queueing(explained.to_json()) as queued:
            lease, bound = await self._bind_any(info, excluded, timeout_s)
            queued.bound(lease.backend.name, self.clock() - started)
            return lease, bound

    async def _bind_any(self, info: RequestInfo, excluded: set[str],
                        timeout_s: float) -> tuple[Lease, RequestInfo]:
        """A lease for ``info`` on a backend not in ``excluded``, and the request as bound.
        When every server of its revision has failed it (all excluded), any revision of
        the model may take it: nothing was sent, and in a rollout the baseline answers what
        the candidate failed."""
        attempt = dataclasses.replace(info, exclude=frozenset(excluded)) if excluded else info
        try:
            return await self.dispatcher.acquire(attempt, timeout_s), attempt
        except NoBackendError:
            if not excluded or info.revision is None:
                raise
        attempt = dataclasses.replace(attempt, revision=None)
        return await self.dispatcher.acquire(attempt, timeout_s), attempt

    def _unbound(self, exc: NoBackendError | ShedError, exchange: Exchange) -> web.Response:
        """The answer when no backend could take the request: 404 for an unknown model,
        503 for none usable, 429 with Retry-After when shed."""
        if isinstance(exc, ShedError):
            exchange.shed = True
            self.metrics.shed.labels(exc.reason).inc()
            return error_response(429, str(exc), "rate_limit_exceeded",
                                  headers={"Retry-After": str(exc.retry_after)})
        status = 404 if exc.stage == "model" else 503
        kind = "model_not_found" if status == 404 else "service_unavailable"
        return error_response(status, exc.message, kind)

    @contextlib.contextmanager
    def _finishing(self, exchange: Exchange, info: RequestInfo,
                   before: int = 0) -> Iterator[None]:
        """Tell the dispatcher how a tenant's bound request ended (its fair share): the
        tokens it produced beyond ``before`` (a continuation's, after the first part)."""
        try:
            yield
        finally:
            if info.tenant is not None:
                meter = exchange.meter
                produced = meter.output_tokens() if meter is not None else 0
                self.dispatcher.finished(info, produced - before)

    async def _consume_failure(
        self, exchange: Exchange, upstream: UpstreamResponse, backend: Backend
    ) -> web.Response:
        try:
            body = await upstream.read(MAX_ERROR_BODY)
        except UPSTREAM_ERRORS:
            body = b""
        finally:
            upstream.close()
        self._failed(backend, f"http_{upstream.status}")
        self._count_failure(exchange, backend, upstream.status)
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
        exchange: Exchange,
        upstream: UpstreamResponse,
        lease: Lease,
        start: float,
        sent_at: float,
        strip_usage: bool = False,
        tap: StreamTap | None = None,
    ) -> web.StreamResponse:
        backend, request = lease.backend, exchange.request
        exchange.served_by = backend.name
        metrics = self.metrics.backend(backend.name)
        headers = {**exchange.extra_headers, REGION_HEADER: self.settings.region,
                   BACKEND_HEADER: backend.name,
                   QUEUE_HEADER: str(round((sent_at - start) * 1000))}
        revision = _revision_of(exchange, backend)
        if revision is not None:
            headers[REVISION_HEADER] = revision
        resp = response_for(upstream, headers)
        sse = upstream.content_type == "text/event-stream"
        meter = exchange.meter or StreamMeter()
        first = True
        first_byte_s: float | None = None

        def on_chunk(chunk: bytes, now: float) -> None:
            nonlocal first, first_byte_s
            if first:  # the backend's first byte, even if the client left
                first = False
                first_byte_s = now - sent_at
                lease.started()
                if exchange.trace is None:
                    metrics.ttft.observe(now - start)
                else:
                    metrics.ttft.observe(now - start, exchange.trace.exemplar())
                    exchange.trace.set(genai.RESPONSE_TIME_TO_FIRST_CHUNK,
                                       round(now - start, 6))
                if upstream.status == 200:
                    self._ttft(backend, now - sent_at, lease.occupancy)
                    if exchange.info is not None:
                        self.hedging.bound.observe(exchange.info.prompt_tokens, now - sent_at)
            if sse:
                meter.observe(chunk, now)
            else:
                meter.body(chunk)

        watched = sse and upstream.status == 200
        silence = self.silences.of(backend.name)
        try:
            end = await relay(request, upstream, resp, on_chunk, self.clock,
                              UsageEventFilter() if strip_usage and sse else None,
                              self.settings.client_stall_s,
                              tap=tap if watched else None,
                              silence_s=silence.seconds() if watched and tap else None,
                              gaps=silence.observe if watched else None,
                              capture=exchange.capture)
            exchange.relay_end = end
        except asyncio.CancelledError:  # the client went away while we waited upstream
            self.metrics.client_gone.labels("before_end").inc()
            raise
        self._count_end(end, backend, request)
        if revision is not None:
            assert exchange.info is not None  # a revision is one of the request's model
            self._count_answer(exchange.info.model, revision, end, upstream.status, sse,
                               meter, first_byte_s)
        if end not in WHOLE_ANSWER:
            return resp
        ended = self.clock()
        metrics.e2e.observe(ended - start,
                            exchange.trace.exemplar() if exchange.trace is not None else None)
        if exchange.info is not None:
            self.dispatcher.demand.ended(exchange.info.model, ended, ended - start)
        if upstream.status >= 500:
            self._failed(backend, f"http_{upstream.status}")
        else:
            self.pool.record_success(backend)
            if upstream.status == 200 and exchange.info is not None:
                self._learn(lease, exchange.info, meter)
        return resp

    def _count_failure(self, exchange: Exchange, backend: Backend, status: int) -> None:
        """Count an answer that never reached the client (a retried or unreachable
        backend) for its revision, if the backend declares one of the model."""
        revision = _revision_of(exchange, backend)
        if revision is not None:
            assert exchange.info is not None
            self.outcomes.record(exchange.info.model, revision, ok=status < 500)

    def _count_answer(self, model: str, revision: str, end: RelayEnd, status: int, sse: bool,
                      meter: StreamMeter, first_byte_s: float | None) -> None:
        """Count a relayed answer for its revision: an error if it failed or was cut
        upstream; a whole stream with its inter-token latency, finish reason and tokens.
        An answer the client left is not counted."""
        if end in (RelayEnd.UPSTREAM_FAILED, RelayEnd.UPSTREAM_STALLED):
            self.outcomes.record(model, revision, ok=False, ttft_s=first_byte_s)
        elif end not in WHOLE_ANSWER:
            return
        elif status != 200 or not sse:
            self.outcomes.record(model, revision, ok=status < 500, ttft_s=first_byte_s)
        else:
            rate = meter.rate()
            self.outcomes.record(model, revision, ok=True, ttft_s=first_byte_s,
                                 itl_s=1.0 / rate if rate else None, finish=meter.finish,
                                 output_tokens=meter.output_tokens())

    def _count_end(self, end: RelayEnd, backend: Backend, request: web.Request) -> None:
        if end is RelayEnd.UPSTREAM_FAILED:
            self._failed(backend, "mid_stream")
        elif end is RelayEnd.UPSTREAM_STALLED:
            self._failed(backend, "stall")
            log.info("backend %s went silent mid-answer: resuming the stream elsewhere",
                     backend.name)
        elif end in CLIENT_GONE:
            self.metrics.client_gone.labels(CLIENT_GONE[end]).inc()
            log.debug("client went away (%s) from a %s answer", CLIENT_GONE[end], backend.name)
        elif end is RelayEnd.CLIENT_STALLED:
            self.metrics.stalled_clients.inc()
            log.debug("client %s cut: it took nothing of a %s answer for %.0f s",
                      request.remote, backend.name, self.settings.client_stall_s)

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
            self.pool.record_stream(lease, rate, meter.step_seconds())
        if meter.events:
            self.output_lengths.observe(
                info.model, info.prompt_tokens, info.max_tokens, meter.events
            )


@dataclasses.dataclass
class _Resume:
    """What resuming a stalled stream needs of its first attempt."""

    resp: web.StreamResponse  # the client's answer, open
    tap: StreamTap
    path: str
    headers: Mapping[str, str]
    raw: bytes  # the body as forwarded
    strip_usage: bool
    revision: str | None  # the revision that served it: the continuation's


def _calling(trace: RequestTrace | None, backend: Backend, path: str,
             headers: CIMultiDict[str]) -> UpstreamSpan | NoSpan:
    """The span of one call to ``backend`` (nothing when the request is not traced)."""
    if trace is None:
        return NO_SPAN
    url = URL(backend.spec.url)
    return trace.calling(backend.name, (url.host or "", url.port or 80), path, headers)


def _revision_of(exchange: Exchange, backend: Backend) -> str | None:
    """The revision ``backend`` declares of the request's model (None: none declared)."""
    info = exchange.info
    return backend.spec.revision_of(info.model) if info is not None else None
