# SPDX-License-Identifier: Apache-2.0
"""One trace from the OpenAI SDK through the balancer to the GPU server: the client's
span, the balancer's server span with its queue and upstream children, and the
simulator's vLLM ``llm_request`` span, each process exporting over OTLP/HTTP (the
official exporter, real protobuf) to the receiver."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import openai
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler
from opentelemetry.trace import SpanKind, Tracer

from regions.balancer import Balancer, BalancerConfig, build_balancer
from regions.balancer.scheduling.backend import BackendSpec
from regions.simulator.fleet import Fleet, ServerSpec
from telemetry import genai
from telemetry.correlation import correlation_id
from telemetry.otel import Tracing, build_tracing
from telemetry.receiver import OtlpReceiver
from telemetry.trace_text import render_trace

MODEL = "sim-model"
SAMPLE_ALL = ParentBased(ALWAYS_ON)


def tracing(receiver: OtlpReceiver, service: str, scope: str,
            sampler: Sampler = SAMPLE_ALL) -> Tracing:
    """A process's tracing as telemetry.otel builds it, exporting every 50 ms."""
    return build_tracing(service, scope, OTLPSpanExporter(
        endpoint=f"{receiver.endpoint}/v1/traces"), sampler, schedule_delay_ms=50)


@asynccontextmanager
async def traced_stack(receiver: OtlpReceiver, sampler: Sampler = SAMPLE_ALL,
                       gpus: int = 2) -> AsyncIterator[tuple[str, Balancer]]:
    balancer_side = tracing(receiver, "director-balancer", "director.balancer", sampler)
    gpu_side = tracing(receiver, "director-simulator", genai.VLLM_SCOPE)
    specs = [ServerSpec(f"gpu{i}", models=(MODEL,)) for i in range(gpus)]
    try:
        async with Fleet(specs, time_scale=20.0,
                         tracer=gpu_side.tracer) as fleet:
            backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 8) for s in fleet]
            config = BalancerConfig(tracer=balancer_side.tracer)
            async with build_balancer("use1", backends, config) as balancer:
                yield balancer.url, balancer
    finally:  # a flush blocks: not on the loop the receiver answers on
        await asyncio.to_thread(balancer_side.shutdown)
        await asyncio.to_thread(gpu_side.shutdown)


async def one_chat(url: str, client_tracer: Tracer | None) -> tuple[str | None, str]:
    """A streamed chat through the OpenAI SDK, in a client span when ``client_tracer``;
    the client span's trace id (hex) and the text."""
    sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    headers: dict[str, str] = {}
    trace_id = None
    span = None
    if client_tracer is not None:
        span = client_tracer.start_span("ask", kind=SpanKind.CLIENT)
        ctx = span.get_span_context()
        trace_id = f"{ctx.trace_id:032x}"
        headers["traceparent"] = f"00-{trace_id}-{ctx.span_id:016x}-01"
    try:
        stream = await sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "why is the sky blue"}],
            stream=True, max_tokens=64, stream_options={"include_usage": True},
            extra_body={"x_output_tokens": 12}, extra_headers=headers)
        text = []
        async for chunk in stream:
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
    finally:
        if span is not None:
            span.end()
        await sdk.close()
    return trace_id, "".join(text)


async def test_a_chat_request_is_one_trace_from_the_sdk_to_the_gpu_server() -> None:
    async with OtlpReceiver() as receiver:
        client_side = tracing(receiver, "client", "test-client")
        async with traced_stack(receiver) as (url, _balancer):
            trace_id, text = await one_chat(url, client_side.tracer)
            assert text
            await receiver.wait_for(5, timeout=10)
        await asyncio.to_thread(client_side.shutdown)
        spans = receiver.trace(trace_id or "")
        print(render_trace(spans))
        by_name = {s["name"]: s for s in spans}
        assert set(by_name) == {"ask", f"chat {MODEL}", "director.queue",
                                "POST /v1/chat/completions", genai.VLLM_SPAN_NAME}, by_name
        ask, server = by_name["ask"], by_name[f"chat {MODEL}"]
        queue, call = by_name["director.queue"], by_name["POST /v1/chat/completions"]
        engine = by_name[genai.VLLM_SPAN_NAME]
        # one chain of parents: client -> balancer -> (queue, upstream call) -> engine
        assert server["parent_span_id"] == ask["span_id"]
        assert queue["parent_span_id"] == server["span_id"]
        assert call["parent_span_id"] == server["span_id"]
        assert engine["parent_span_id"] == call["span_id"]
        assert {s["service"] for s in spans} == {"client", "director-balancer",
                                                  "director-simulator"}
        assert server["kind"] == "SERVER" and call["kind"] == "CLIENT"
        assert engine["kind"] == "SERVER" and engine["scope"] == genai.VLLM_SCOPE
        attrs = server["attributes"]
        assert attrs[genai.OPERATION_NAME] == "chat"
        assert attrs[genai.REQUEST_MODEL] == MODEL
        assert attrs[genai.RESPONSE_MODEL] == MODEL
        assert attrs[genai.USAGE_OUTPUT_TOKENS] == 12
        assert attrs[genai.USAGE_INPUT_TOKENS] > 0
        assert attrs[genai.RESPONSE_FINISH_REASONS] == ["stop"]
        assert attrs[genai.RESPONSE_ID].startswith("chatcmpl-")
        assert attrs["director.region"] == "use1"
        # what the DNS decision spans of clients in 127.0.0.0/24 asking for this name carry
        assert attrs["director.correlation_id"] == correlation_id("127.0.0.1", "127.0.0.9")
        assert attrs["director.backend"] in ("gpu0", "gpu1")
        assert attrs["http.response.status_code"] == 200
        assert attrs[genai.RESPONSE_TIME_TO_FIRST_CHUNK] > 0
        assert server["schema_url"] == genai.SCHEMA_URL
        # the pipeline's view, on the queue span: every candidate scored
        scores = json.loads(queue["attributes"]["director.decision.scores"])
        assert scores and all(set(v) == {"gpu0", "gpu1"} for v in scores.values())
        assert queue["attributes"]["director.backend"] == attrs["director.backend"]
        assert call["attributes"]["director.backend"] == attrs["director.backend"]
        assert engine["attributes"][genai.VLLM_USAGE_COMPLETION_TOKENS] == 12
        assert receiver.rejected == 0


async def test_an_unsampled_request_tells_the_gpu_server_so() -> None:
    """Sampled off at the balancer: no span anywhere, yet the engine is told (flags 00),
    so an engine that samples by its parent records nothing either."""
    async with OtlpReceiver() as receiver:
        async with traced_stack(receiver, sampler=ALWAYS_OFF) as (url, _balancer):
            for _ in range(3):
                _, text = await one_chat(url, None)
                assert text
            await asyncio.sleep(0.3)
        assert list(receiver.spans) == []


async def test_a_client_that_did_not_sample_is_followed() -> None:
    async with OtlpReceiver() as receiver:
        async with traced_stack(receiver) as (url, _balancer):
            sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
            await sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                extra_headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-00"})
            await sdk.close()
            await asyncio.sleep(0.3)
        assert list(receiver.spans) == []


async def test_the_latency_histograms_point_at_sampled_traces() -> None:
    """OpenMetrics exposition carries a sampled request's trace id as the exemplar of its
    TTFT and E2E buckets; Prometheus text, as before, does not."""
    import aiohttp

    async with OtlpReceiver() as receiver, traced_stack(receiver) as (url, balancer):
        client_side = tracing(receiver, "client", "test-client")
        trace_id, _ = await one_chat(url, client_side.tracer)
        await asyncio.to_thread(client_side.shutdown)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{balancer.admin_url}/metrics", headers={
                    "Accept": "application/openmetrics-text; version=1.0.0"}) as resp:
                assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
                open_metrics = await resp.text()
            async with http.get(f"{balancer.admin_url}/metrics") as resp:
                assert resp.headers["Content-Type"].startswith("text/plain")
                plain = await resp.text()
    for name in ("director_balancer_ttft_seconds_bucket", "director_balancer_e2e_seconds_bucket"):
        lines = [ln for ln in open_metrics.splitlines()
                 if ln.startswith(name) and f'trace_id="{trace_id}"' in ln]
        assert lines, f"no exemplar on {name}"
    assert "trace_id" not in plain


async def test_a_client_may_name_its_correlation_id() -> None:
    async with OtlpReceiver() as receiver, traced_stack(receiver) as (url, _balancer):
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        for sent in ("edge-7f3a", "not sane!"):
            await sdk.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                extra_headers={"x-director-correlation": sent})
        await sdk.close()
        await receiver.wait_for(2, timeout=10, name=f"chat {MODEL}")
    ids = [s["attributes"]["director.correlation_id"] for s in receiver.spans
           if s["name"] == f"chat {MODEL}"]
    assert ids == ["edge-7f3a", correlation_id("127.0.0.1", "127.0.0.1")]


@pytest.mark.parametrize("garbage", [b"\x00\x01not protobuf", b"{\"resourceSpans\": 7}"])
async def test_the_receiver_refuses_what_does_not_decode(garbage: bytes) -> None:
    import aiohttp

    async with OtlpReceiver() as receiver, aiohttp.ClientSession() as http:
        kind = "application/json" if garbage.startswith(b"{") else "application/x-protobuf"
        async with http.post(f"{receiver.endpoint}/v1/traces", data=garbage,
                             headers={"Content-Type": kind}) as resp:
            assert resp.status == 400
        async with http.post(f"{receiver.endpoint}/v1/traces", data=b"x",
                             headers={"Content-Type": "text/plain"}) as resp:
            assert resp.status == 415
        assert receiver.rejected == 2 and not receiver.spans


def test_dataclass_config_carries_no_tracer_by_default() -> None:
    assert BalancerConfig().tracer is None
    assert "tracer" in {f.name for f in dataclasses.fields(BalancerConfig)}
