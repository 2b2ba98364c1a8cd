# SPDX-License-Identifier: Apache-2.0
"""The OpenTelemetry GenAI semantic conventions we write, pinned to one version.

The GenAI conventions are still marked Development and rename attributes between
releases (``gen_ai.system`` became ``gen_ai.provider.name``, ``gen_ai.usage.prompt_tokens``
``gen_ai.usage.input_tokens``), so the names are spelled out here, at version 1.44.0,
and our spans carry that schema URL. vLLM's own span (``llm_request``) still writes its
older names; the simulator writes what vLLM writes (``VLLM_*``).
"""

from __future__ import annotations

SEMCONV_VERSION = "1.44.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

OPERATION_NAME = "gen_ai.operation.name"  # chat, text_completion, embeddings
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# vLLM's span (vllm/tracing.py, ``SpanAttributes``), written by the simulator as vLLM does
VLLM_SPAN_NAME = "llm_request"
VLLM_SCOPE = "vllm.llm_engine"
VLLM_REQUEST_ID = "gen_ai.request.id"
VLLM_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
VLLM_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
VLLM_LATENCY_TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
VLLM_LATENCY_E2E = "gen_ai.latency.e2e"
VLLM_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
