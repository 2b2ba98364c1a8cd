"""Scrape a GPU server's Prometheus ``/metrics`` into one normalised :class:`GpuLoad`.

Parsed with ``prometheus_client.parser.text_string_to_metric_families``. Per engine, waiting
(queued requests), running (in the batch) and cache usage in [0, 1]:

- vllm: waiting ``vllm:num_requests_waiting``, running ``vllm:num_requests_running``,
  cache ``vllm:kv_cache_usage_perc`` (legacy name: ``vllm:gpu_cache_usage_perc``);
- sglang: waiting ``sglang:num_queue_reqs``, running ``sglang:num_running_reqs``,
  cache ``sglang:token_usage``;
- tgi: waiting ``tgi_queue_size``, running ``tgi_batch_current_size``, no cache metric;
- triton: waiting ``nv_inference_pending_request_count``, no running or cache metric.

Counts are summed over every label set (vLLM's ``engine`` label for data-parallel engines,
models, ranks); cache usage, a fraction per engine, is their mean. An unknown engine name is
detected from the page. A page with none of the engine's queue metrics is an error, so a
misconfigured ``engine`` never reads as an idle server.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from director.state.records import GpuLoad
from director.state.store import StateStore
from workers.errors import MetricsError
from workers.probes.http import http_get
from workers.targets import GpuTarget


@dataclass(frozen=True)
class EngineMetrics:
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    cache_usage: tuple[str, ...]  # first one present wins


ENGINES: dict[str, EngineMetrics] = {
    "vllm": EngineMetrics(
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ),
    "sglang": EngineMetrics(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        cache_usage=("sglang:token_usage",),
    ),
    "tgi": EngineMetrics(
        waiting=("tgi_queue_size",),
        running=("tgi_batch_current_size",),
        cache_usage=(),
    ),
    "triton": EngineMetrics(
        waiting=("nv_inference_pending_request_count",),
        running=(),
        cache_usage=(),
    ),
}


def samples_by_name(text: str) -> dict[str, list[float]]:
    """Every sample value of a Prometheus text page, by sample name."""
    values: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values.setdefault(sample.name, []).append(float(sample.value))
    except ValueError as exc:
        raise MetricsError(f"not Prometheus text: {exc}") from exc
    return values


def detect_engine(values: dict[str, list[float]]) -> str | None:
    for engine, metrics in ENGINES.items():
        if any(name in values for name in metrics.waiting):
            return engine
    return None


def parse_load(text: str, engine: str, *, now: float | None = None) -> GpuLoad:
    """The load a metrics page reports, read with ``engine``'s metric names."""
    values = samples_by_name(text)
    if engine not in ENGINES:
        detected = detect_engine(values)
        if detected is None:
            raise MetricsError(f"unknown engine {engine!r} and no known engine's metrics found")
        engine = detected
    metrics = ENGINES[engine]
    if not any(name in values for name in metrics.waiting):
        expected = ", ".join(metrics.waiting)
        raise MetricsError(f"engine {engine}: none of {expected} in the metrics page")
    cache: float | None = None
    for name in metrics.cache_usage:
        if values.get(name):
            cache = sum(values[name]) / len(values[name])
            break
    return GpuLoad(
        engine=engine,
        waiting=sum(sum(values.get(name, ())) for name in metrics.waiting),
        running=sum(sum(values.get(name, ())) for name in metrics.running),
        cache_usage=cache,
        timestamp=time.time() if now is None else now,
    )


def scrape_gpu_metrics(store: StateStore, target: GpuTarget) -> GpuLoad | None:
    """Scrape one GPU server and store its load; None when it has no metrics path."""
    if target.metrics_path is None:
        return None
    now = time.time()
    result = http_get(target.url + target.metrics_path, timeout=target.timeout)
    if result.status != 200:
        raise MetricsError(
            f"{target.url}{target.metrics_path}: {result.error or f'status {result.status}'}"
        )
    load = parse_load(result.body.decode("utf-8", errors="replace"), target.engine, now=now)
    store.write_gpu_load(target.region, target.name, load)
    return load
