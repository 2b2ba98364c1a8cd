# SPDX-License-Identifier: Apache-2.0
"""Telemetry shared by both tiers: OpenTelemetry tracing set up from the standard
``OTEL_*`` variables (``otel``), the GenAI attribute names we pin (``genai``), and a small
OTLP/HTTP receiver that keeps spans for tests and for ``director traces`` (``receiver``,
``trace_text``). It imports no other package of ours."""

from __future__ import annotations

import importlib
from typing import Any

# each name's module, imported on first use: the balancer reads ``genai`` on its hot path
# and loads neither the receiver nor the protocol's definitions
_HOMES = {
    "OtlpReceiver": "telemetry.receiver",
    "Tracing": "telemetry.otel",
    "TracingConfigError": "telemetry.otel",
    "build_tracing": "telemetry.otel",
    "render_trace": "telemetry.trace_text",
    "tracing_enabled": "telemetry.otel",
    "tracing_from_env": "telemetry.otel",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'telemetry' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
