# SPDX-License-Identifier: Apache-2.0
"""``/metrics`` of one simulated server, on its own registry, under the metric names of the
serving engine it stands for (vLLM by default; SGLang, TGI or Triton as a policy's ``engine``
says), so that the probe workers scrape it as they would the real one.

Gauges and token counters are read from the engine at scrape time; the latency histograms
are observed by the HTTP layer as requests end. vLLM and SGLang label every family with
``model_name`` (the server's first model), Triton with ``model`` and ``version``, TGI with
nothing. Latencies are model seconds: wall seconds times ``time_scale``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from regions.simulator.batching import Sequence
from regions.simulator.engine import Engine
from regions.simulator.engine_info import kv_gauges
from regions.simulator.errors import SimConfigError

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


@dataclass(frozen=True)
class MetricNames:
    """One serving engine's names for what the simulator exports; ``None``: it has none."""

    waiting: str
    running: str | None = None
    kv_usage: str | None = None
    prompt_tokens: str | None = None
    generation_tokens: str | None = None
    preemptions: str | None = None
    prefix_queries: str | None = None
    prefix_hits: str | None = None
    ttft: str | None = None
    e2e: str | None = None
    labels: tuple[str, ...] = ("model_name",)

    def families(self) -> dict[str, str]:
        """Family name -> Prometheus type, for every metric this engine exports."""
        return {name: kind for role, kind in ROLE_TYPES.items()
                if (name := getattr(self, role)) is not None}


ROLE_TYPES = {
    "waiting": "gauge", "running": "gauge", "kv_usage": "gauge",
    "prompt_tokens": "counter", "generation_tokens": "counter", "preemptions": "counter",
    "prefix_queries": "counter", "prefix_hits": "counter",
    "ttft": "histogram", "e2e": "histogram",
}
ENGINE_METRICS: dict[str, MetricNames] = {
    "vllm": MetricNames(
        waiting="vllm:num_requests_waiting", running="vllm:num_requests_running",
        kv_usage="vllm:kv_cache_usage_perc", prompt_tokens="vllm:prompt_tokens",
        generation_tokens="vllm:generation_tokens", preemptions="vllm:num_preemptions",
        # vllm/v1/metrics/loggers.py: counters in tokens, exposed with a _total suffix
        prefix_queries="vllm:prefix_cache_queries", prefix_hits="vllm:prefix_cache_hits",
        ttft="vllm:time_to_first_token_seconds", e2e="vllm:e2e_request_latency_seconds"),
    "sglang": MetricNames(
        waiting="sglang:num_queue_reqs", running="sglang:num_running_reqs",
        kv_usage="sglang:token_usage", prompt_tokens="sglang:prompt_tokens",
        generation_tokens="sglang:generation_tokens",
        ttft="sglang:time_to_first_token_seconds", e2e="sglang:e2e_request_latency_seconds"),
    "tgi": MetricNames(
        waiting="tgi_queue_size", running="tgi_batch_current_size",
        e2e="tgi_request_duration", labels=()),
    "triton": MetricNames(
        waiting="nv_inference_pending_request_count", labels=("model", "version")),
}


def metric_names(engine_name: str) -> MetricNames:
    """``engine_name``'s entry of ``ENGINE_METRICS``; ``SimConfigError`` if it has none."""
    try:
        return ENGINE_METRICS[engine_name]
    except KeyError:
        known = ", ".join(ENGINE_METRICS)
        raise SimConfigError(f"engine: {engine_name!r} is not one of {known}") from None


class _EngineCollector(Collector):
    def __init__(self, engine: Engine, names: MetricNames, label_values: list[str],
                 engine_name: str) -> None:
        self._engine = engine
        self._engine_name = engine_name
        self._names = names
        self._label_values = label_values

    def collect(self) -> Iterator[Metric]:
        state, names = self._engine.state(), self._names
        c = state.counters
        for family, name, doc, value in (
            (GaugeMetricFamily, names.running, "Requests in model execution batches.",
             state.running),
            (GaugeMetricFamily, names.waiting, "Requests waiting to be processed.",
             state.waiting),
            (GaugeMetricFamily, names.kv_usage, "KV-cache usage; 1 means 100 percent.",
             state.kv_usage),
            (CounterMetricFamily, names.prompt_tokens, "Prefill tokens processed.",
             c.prompt_tokens),
            (CounterMetricFamily, names.generation_tokens, "Generation tokens processed.",
             c.generation_tokens),
            (CounterMetricFamily, names.preemptions, "Cumulative number of preemptions.",
             c.preemptions),
            (CounterMetricFamily, names.prefix_queries,
             "Prefix cache queries, in terms of number of queried tokens.",
             c.prefix_cache_queries),
            (CounterMetricFamily, names.prefix_hits,
             "Prefix cache hits, in terms of number of cached tokens.", c.prefix_cache_hits),
        ):
            if name is not None:
                metric = family(name, doc, labels=list(names.labels))
                metric.add_metric(self._label_values, value)
                yield metric
        yield from kv_gauges(self._engine_name, self._engine)
        if self._engine_name == "vllm" and self._engine.config.max_loras:
            yield lora_info(self._engine)


def lora_info(engine: Engine) -> Metric:
    """vLLM's ``vllm:lora_requests_info``: the batch's adapter limit and the adapters of
    the running and waiting requests, as comma-separated labels; the value is the time."""
    running, waiting = engine.adapter_requests()
    metric = GaugeMetricFamily("vllm:lora_requests_info", "Running stats on lora requests.",
                               labels=["max_lora", "running_lora_adapters",
                                       "waiting_lora_adapters"])
    metric.add_metric([str(engine.config.max_loras), ",".join(sorted(running)),
                       ",".join(sorted(waiting))], time.time())
    return metric


class ServerMetrics:
    """The Prometheus registry of one simulated server, with ``engine_name``'s metric
    names (one of ``ENGINE_METRICS``)."""

    def __init__(self, engine: Engine, model_name: str, engine_name: str = "vllm") -> None:
        self.model_name = model_name
        names = metric_names(engine_name)
        label_values = [model_name, "1"][:len(names.labels)]  # the model, then Triton's version
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(engine, names, label_values, engine_name))
        self._ttft = _histogram(names.ttft, "Histogram of time to first token in seconds.",
                                TTFT_BUCKETS, names.labels, label_values, self.registry)
        self._e2e = _histogram(names.e2e, "Histogram of end to end request latency in "
                               "seconds.", E2E_BUCKETS, names.labels, label_values,
                               self.registry)

    def observe(self, seq: Sequence) -> None:
        """Record a request's TTFT (if it got a token) and E2E latency (if it finished)."""
        if seq.first_token_at is not None and self._ttft is not None:
            self._ttft.observe(seq.first_token_at - seq.arrival)
        if seq.finished_at is not None and self._e2e is not None:
            self._e2e.observe(seq.finished_at - seq.arrival)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _histogram(name: str | None, doc: str, buckets: tuple[float, ...],
               labels: tuple[str, ...], label_values: list[str],
               registry: CollectorRegistry) -> Histogram | None:
    if name is None:
        return None
    histogram = Histogram(name, doc, list(labels), buckets=buckets, registry=registry)
    return histogram.labels(*label_values) if labels else histogram
