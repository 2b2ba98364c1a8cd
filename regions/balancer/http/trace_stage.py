# SPDX-License-Identifier: Apache-2.0
"""Stage ``trace``: a server span per request, sampled (first in the chain, only when
tracing is on: ``telemetry.otel``).

The span continues the client's W3C ``traceparent`` when it sent one (its sampling
decision included: ``parentbased_*`` samplers follow it); otherwise it starts a trace.
An unsampled request costs an id and a ``traceparent`` for the GPU server; a sampled one
gets a ``RequestTrace`` (``request_trace``) and, when its answer has ended, the GenAI
attributes (pinned in ``telemetry.genai``: operation, model, max tokens, stream, the
response's id and model, finish reasons, token usage) and director's own:
``director.region``, ``director.tenant``, ``director.request_id``,
``director.correlation_id`` (the client's ``x-director-correlation``, or the one its
``Host`` and network give: ``telemetry.correlation``; the DNS decision spans of the same
clients carry it), ``director.backend``
and ``director.backends`` (every one it was bound to, in order; the proxy adds
``director.retries``, ``director.resumes`` and ``director.hedge``),
``director.revision``, ``director.queue.wait_ms``, ``director.overflowed`` (a sibling sent
it), ``director.overflow`` (sent on to a sibling), ``director.degraded`` (a ladder step),
``director.cache``, ``director.relay_end``, ``http.response.status_code``; the queue's
and each upstream call's spans are its children (``proxy``). The span's name is the
GenAI one, ``{operation} {model}``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from regions.balancer.http.answer_summary import AnswerSummary
from regions.balancer.http.exchange import Exchange, Next
from regions.balancer.http.request_trace import RequestTrace, traceparent
from regions.balancer.types import Endpoint
from telemetry import genai
from telemetry.correlation import CORRELATION_HEADER, correlation_id, sent_correlation

OPERATIONS = {Endpoint.CHAT: "chat", Endpoint.COMPLETIONS: "text_completion",
              Endpoint.EMBEDDINGS: "embeddings"}
# answer headers the stages write, and the attribute each becomes
ANSWER_HEADERS = {
    "x-director-revision": "director.revision",
    "x-director-overflow": "director.overflow",
    "x-director-degraded": "director.degraded",
    "x-director-cache": "director.cache",
}
QUEUE_HEADER = "x-director-queue-ms"


class TraceRequests:
    """Stage: the request's server span (see the module's docstring)."""

    def __init__(self, tracer: Tracer, region: str) -> None:
        self.tracer = tracer
        self.region = region
        self._propagator = TraceContextTextMapPropagator()

    async def __call__(self, exchange: Exchange, call_next: Next) -> web.StreamResponse:
        headers = exchange.request.headers
        parent = self._propagator.extract(headers) if "traceparent" in headers else None
        operation = OPERATIONS[exchange.endpoint]
        span = self.tracer.start_span(operation, context=parent, kind=SpanKind.SERVER,
                                      record_exception=False, set_status_on_exception=False)
        if not span.is_recording():
            exchange.traceparent = traceparent(span)
            return await call_next(exchange)
        exchange.trace = RequestTrace(self.tracer, span)
        summary = AnswerSummary()
        exchange.add_capture(summary)
        response: web.StreamResponse | None = None
        try:
            response = await call_next(exchange)
            return response
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            try:
                _describe(span, exchange, response, summary, self.region, operation)
            finally:
                span.end()


def _describe(span: Any, exchange: Exchange, response: web.StreamResponse | None,
              summary: AnswerSummary, region: str, operation: str) -> None:
    request = exchange.request
    attributes: dict[str, Any] = {
        genai.OPERATION_NAME: operation,
        "director.region": region,
        "director.request_id": exchange.request_id(),
        "director.overflowed": exchange.overflowed,
    }
    correlation = (sent_correlation(request.headers.get(CORRELATION_HEADER))
                   or correlation_id(request.host, request.remote or ""))
    if correlation is not None:
        attributes["director.correlation_id"] = correlation
    info = exchange.info
    if info is not None:
        span.update_name(f"{operation} {info.model}")
        attributes[genai.REQUEST_MODEL] = info.model
        attributes[genai.REQUEST_STREAM] = info.stream
        if info.max_tokens is not None:
            attributes[genai.REQUEST_MAX_TOKENS] = info.max_tokens
        if info.tenant is not None:
            attributes["director.tenant"] = info.tenant
        if info.priority:
            attributes["director.priority"] = info.priority
    if exchange.bound:
        attributes["director.backends"] = list(exchange.bound)
    if exchange.served_by is not None:
        attributes["director.backend"] = exchange.served_by
    if exchange.relay_end is not None:
        attributes["director.relay_end"] = exchange.relay_end.value
    if response is not None:
        attributes["http.response.status_code"] = response.status
        for header, key in ANSWER_HEADERS.items():
            value = response.headers.get(header)
            if value is not None:
                attributes[key] = value
        queued = response.headers.get(QUEUE_HEADER)
        if queued is not None and queued.isdigit():
            attributes["director.queue.wait_ms"] = int(queued)
        if response.status >= 500:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status}"))
    attributes.update(summary.attributes())
    span.set_attributes(attributes)

