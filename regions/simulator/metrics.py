# SPDX-License-Identifier: Apache-2.0
"""``/metrics`` of one simulated server, under vLLM's metric names, on its own registry.

Gauges and token counters are read from the engine at scrape time; the latency histograms
are observed by the HTTP layer as requests end. Every family carries ``model_name`` (the
server's first model, as vLLM labels everything with its served model name). Latencies are
model seconds: wall seconds times ``time_scale``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from regions.simulator.batching import Sequence
from regions.simulator.engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# vLLM's bucket boundaries.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
E2E_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class _EngineCollector(Collector):
    def __init__(self, engine: Engine, model_name: str) -> None:
        self._engine = engine
        self._model = model_name

    def collect(self) -> Iterator[Metric]:
        state = self._engine.state()
        labels = ["model_name"]
        for name, doc, value in (
            ("vllm:num_requests_running", "Requests in model execution batches.", state.running),
            ("vllm:num_requests_waiting", "Requests waiting to be processed.", state.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage; 1 means 100 percent.", state.kv_usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=labels)
            gauge.add_metric([self._model], value)
            yield gauge
        c = state.counters
        for name, doc, value in (
            ("vllm:prompt_tokens", "Prefill tokens processed.", c.prompt_tokens),
            ("vllm:generation_tokens", "Generation tokens processed.", c.generation_tokens),
            ("vllm:num_preemptions", "Cumulative number of preemptions.", c.preemptions),
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric([self._model], value)
            yield counter


class ServerMetrics:
    """The Prometheus registry of one simulated server."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(engine, model_name))
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            ["model_name"],
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            ["model_name"],
            buckets=E2E_BUCKETS,
            registry=self.registry,
        ).labels(model_name)

    def observe(self, seq: Sequence) -> None:
        """Record a request's TTFT (if it got a token) and E2E latency (if it finished)."""
        if seq.first_token_at is not None:
            self._ttft.observe(seq.first_token_at - seq.arrival)
        if seq.finished_at is not None:
            self._e2e.observe(seq.finished_at - seq.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)
