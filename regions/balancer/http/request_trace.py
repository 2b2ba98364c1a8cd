# SPDX-License-Identifier: Apache-2.0
"""The spans of one sampled request, and the trace context sent on to the GPU server.

A sampled request has a ``RequestTrace`` (``Exchange.trace``, set by ``trace_stage``):
its server span, one ``director.queue`` child per binding (the region queue, with the
pipeline's view of the candidates: each scorer's value, the picker's totals, what each
filter dropped and why) and one client span per call to a GPU server, whose context the
server receives as W3C ``traceparent`` (vLLM and the simulator make their ``llm_request``
span its child). An unsampled request only carries its ``traceparent`` on
(``Exchange.traceparent``), so a GPU server that samples by its parent agrees with us.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from multidict import CIMultiDict
from opentelemetry import trace as otel
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from regions.balancer.http.relay import RelayEnd

TRACEPARENT = "traceparent"
MAX_DECISION_BACKENDS = 16  # the highest totals of a decision kept on the span


def traceparent(span: Span) -> str:
    """W3C ``traceparent`` of ``span``."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class RequestTrace:
    """The server span of one sampled request and the children the proxy opens."""

    __slots__ = ("span", "tracer")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.tracer = tracer
        self.span = span

    def set(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)

    def exemplar(self) -> dict[str, str]:
        """The labels of a histogram exemplar that points at this trace."""
        context = self.span.get_span_context()
        return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}

    def event(self, name: str, **attributes: Any) -> None:
        self.span.add_event(name, attributes)

    def child(self, name: str, kind: SpanKind = SpanKind.INTERNAL) -> Span:
        return self.tracer.start_span(name, context=otel.set_span_in_context(self.span),
                                      kind=kind)

    def queueing(self, decision: dict[str, Any] | None) -> QueueSpan:
        """A ``director.queue`` span from now until the request is bound or given up;
        ``decision``: the pipeline's explained run (``Decision.to_json``) at its start."""
        span = self.child("director.queue")
        if decision is not None:
            for key, value in decision_attributes(decision).items():
                span.set_attribute(key, value)
        return QueueSpan(span)

    def calling(self, backend: str, address: tuple[str, int], path: str,
                headers: CIMultiDict[str]) -> UpstreamSpan:
        """A client span for one call to ``backend`` (its ``traceparent`` put in
        ``headers``), ended by the caller with how the call went."""
        span = self.child(f"POST {path.split('?', 1)[0]}", SpanKind.CLIENT)
        span.set_attribute("director.backend", backend)
        span.set_attribute("server.address", address[0])
        span.set_attribute("server.port", address[1])
        headers[TRACEPARENT] = traceparent(span)
        return UpstreamSpan(span)


class QueueSpan:
    """The region queue's span of one binding (a context manager: ends on exit)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def bound(self, backend: str, waited_s: float) -> None:
        self.span.set_attribute("director.backend", backend)
        self.span.set_attribute("director.queue.wait_s", round(waited_s, 6))

    def __enter__(self) -> QueueSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None:
            self.span.set_attribute("director.queue.outcome", type(exc).__name__)
            reason = getattr(exc, "reason", None) or getattr(exc, "stage", None)
            if reason:
                self.span.set_attribute("director.queue.reason", str(reason))
        self.span.end()


class UpstreamSpan:
    """One call to a GPU server (a context manager: ends on exit, with the relay's end)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def answered(self, status: int) -> None:
        self.span.set_attribute("http.response.status_code", status)
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))

    def first_byte(self, seconds: float) -> None:
        self.span.set_attribute("director.upstream.first_byte_s", round(seconds, 6))

    def ended(self, end: RelayEnd | None) -> None:
        if end is not None:
            self.span.set_attribute("director.relay_end", end.value)

    def __enter__(self) -> UpstreamSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None:
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self.span.end()


class NoSpan:
    """What the proxy holds for a request that is not sampled: every call does nothing."""

    __slots__ = ()

    def bound(self, backend: str, waited_s: float) -> None:
        pass

    def answered(self, status: int) -> None:
        pass

    def first_byte(self, seconds: float) -> None:
        pass

    def ended(self, end: RelayEnd | None) -> None:
        pass

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


NO_SPAN = NoSpan()


def decision_attributes(decision: dict[str, Any]) -> dict[str, str | int]:
    """An explained pipeline run as span attributes: the candidates with the highest
    totals (at most ``MAX_DECISION_BACKENDS``), each scorer's value for them, the
    picker's totals, and what each filter dropped (``backend: filter: why``)."""
    steps = decision.get("steps", [])
    totals: dict[str, float] = next((s["totals"] for s in steps if s["stage"] == "picker"), {})
    top = sorted(totals, key=lambda b: -totals[b])[:MAX_DECISION_BACKENDS]
    scores = {s["plugin"]: {b: s["scores"][b] for b in top if b in s["scores"]}
              for s in steps if s["stage"] == "scorer"}
    dropped = {b: f"{s['plugin']}: {why}" for s in steps if s["stage"] == "filter"
               for b, why in s["dropped"].items()}
    out: dict[str, str | int] = {
        "director.decision.chosen": decision.get("chosen") or "",
        "director.decision.candidates": len(totals),
        "director.decision.totals": _compact({b: totals[b] for b in top}),
        "director.decision.scores": _compact(scores),
    }
    if dropped:
        out["director.decision.dropped"] = _compact(dict(itertools.islice(dropped.items(), 32)))
    if decision.get("stopped_at"):
        out["director.decision.stopped_at"] = decision["stopped_at"]
    return out


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
