# SPDX-License-Identifier: Apache-2.0
"""The span vLLM writes for each request (``llm_request``, a SERVER span of the
``vllm.llm_engine`` scope, child of the request's W3C ``traceparent``; vLLM's
``output_processor`` and ``tracing.SpanAttributes``), written the same way by the
simulator when tracing is on (``OTEL_*``, ``telemetry.otel``), so that a trace joins
across the balancer's hop to a GPU server as it does with vLLM. Latencies are in the
engine's clock (model seconds), as a real engine's are in its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from regions.simulator.batching import Sequence
from regions.simulator.openai_format import InferenceRequest
from telemetry import genai

_PROPAGATOR = TraceContextTextMapPropagator()


def record_request(tracer: Tracer, headers: Mapping[str, str], request_id: str,
                   req: InferenceRequest, seq: Sequence, started_ns: int) -> None:
    """Write the ``llm_request`` span of one request that started at ``started_ns``."""
    parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else None
    attributes: dict[str, str | int | float] = {
        genai.RESPONSE_MODEL: req.model,
        genai.VLLM_REQUEST_ID: request_id,
        genai.VLLM_USAGE_PROMPT_TOKENS: seq.prompt_tokens,
        genai.VLLM_USAGE_COMPLETION_TOKENS: seq.generated,
    }
    if req.max_tokens is not None:
        attributes[genai.REQUEST_MAX_TOKENS] = req.max_tokens
    if seq.first_token_at is not None:
        attributes[genai.VLLM_LATENCY_TIME_TO_FIRST_TOKEN] = seq.first_token_at - seq.arrival
    if seq.finished_at is not None:
        attributes[genai.VLLM_LATENCY_E2E] = seq.finished_at - seq.arrival
    span = tracer.start_span(genai.VLLM_SPAN_NAME, context=parent, kind=SpanKind.SERVER,
                             attributes=attributes, start_time=started_ns)
    span.end(end_time=time.time_ns())
