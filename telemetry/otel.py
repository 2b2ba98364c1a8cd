# SPDX-License-Identifier: Apache-2.0
"""Tracing from the standard OpenTelemetry variables, off unless they ask for it.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or an
OTLP endpoint is given (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` turns it off whatever else is
set. The rest is the SDK's own reading of the variables: the exporter's endpoint, headers
and timeout, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``, the batch processor's
sizes and ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``. One default differs from
the SDK's: without ``OTEL_TRACES_SAMPLER``, a trace is sampled at
``parentbased_traceidratio`` 0.01 (one request in a hundred, or as its caller decided), not
every one, because a balancer handles thousands of requests a second.

Exporters: ``otlp`` (OTLP over HTTP/protobuf, the only protocol installed: ``grpc`` needs
``opentelemetry-exporter-otlp-proto-grpc``) and ``console`` (spans as JSON on stdout).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Tracer

from telemetry.genai import SCHEMA_URL

DEFAULT_RATIO = 0.01
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class TracingConfigError(ValueError):
    """The ``OTEL_*`` variables ask for something this installation cannot do."""


@dataclass(frozen=True)
class Tracing:
    """A tracer provider of one process and the tracer our code uses."""

    provider: TracerProvider
    tracer: Tracer

    def shutdown(self) -> None:
        """Export what is buffered and stop (on the way out of the process)."""
        self.provider.shutdown()


def tracing_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the variables turn tracing on (see the module's docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_from_env(service: str, scope: str,
                     env: Mapping[str, str] = os.environ) -> Tracing | None:
    """A tracer for instrumentation ``scope`` in a process that runs ``service`` (its
    ``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names
    one), or None when tracing is off. TracingConfigError for an exporter or protocol we
    cannot provide, or a sampler argument that is not a ratio."""
    if not tracing_enabled(env):
        return None
    return build_tracing(service, scope, _exporter(env), _sampler(env))


def check_env(env: Mapping[str, str] = os.environ) -> None:
    """TracingConfigError now if the variables ask for what ``tracing_from_env`` cannot
    provide (a process that forks workers checks before, and builds in each worker: a
    batch processor's thread does not survive a fork)."""
    if tracing_enabled(env):
        _exporter(env).shutdown()


def build_tracing(service: str, scope: str, exporter: SpanExporter,
                  sampler: Sampler | None = None, *,
                  schedule_delay_ms: float | None = None) -> Tracing:
    """A tracer provider whose batch processor (its own thread: the event loop never
    waits on an export) sends to ``exporter``; ``sampler`` None: the SDK's reading of
    ``OTEL_TRACES_SAMPLER``."""
    provider = TracerProvider(resource=_resource(service), sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(exporter,
                                                   schedule_delay_millis=schedule_delay_ms))
    return Tracing(provider, provider.get_tracer(scope, schema_url=SCHEMA_URL))


def _resource(service: str) -> Resource:
    detected = Resource.create()
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        return detected.merge(Resource({"service.name": service}))
    return detected


def _sampler(env: Mapping[str, str]) -> Sampler | None:
    if env.get("OTEL_TRACES_SAMPLER", "").strip():
        return None  # the SDK reads it, and its argument
    return ParentBased(TraceIdRatioBased(DEFAULT_RATIO))


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    names = [n for n in names if n and n != "none"] or ["otlp"]
    if len(names) > 1:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER names {len(names)} exporters; "
                                 "director sends to one (an OpenTelemetry Collector fans out)")
    if names[0] == "console":
        return ConsoleSpanExporter()
    if names[0] != "otlp":
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER={names[0]!r}: director exports "
                                 "with 'otlp' or 'console'")
    protocol = next((env[v].strip() for v in PROTOCOL_VARIABLES if env.get(v, "").strip()),
                    "http/protobuf")
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc; or set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (port 4318)") from None
        exporter: SpanExporter = GrpcExporter()
        return exporter
    if protocol != "http/protobuf":
        raise TracingConfigError(f"OTLP protocol {protocol!r}: director sends "
                                 "'http/protobuf' (or 'grpc' with its exporter installed)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
