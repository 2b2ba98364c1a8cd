"""A GPU server's Prometheus ``/metrics`` page, read with its engine's metric names.

Per engine, waiting (queued requests), running (in the batch) and cache usage in [0, 1]:

- vllm: waiting ``vllm:num_requests_waiting``, running ``vllm:num_requests_running``,
  cache ``vllm:kv_cache_usage_perc`` (legacy name: ``vllm:gpu_cache_usage_perc``);
- sglang: waiting ``sglang:num_queue_reqs``, running ``sglang:num_running_reqs``,
  cache ``sglang:token_usage``;
- tgi: waiting ``tgi_queue_size``, running ``tgi_batch_current_size``, no cache metric;
- triton: waiting ``nv_inference_pending_request_count``, no running or cache metric.

Cumulative generated (output) tokens, where the engine counts them: vLLM
``vllm:generation_tokens_total``, SGLang ``sglang:generation_tokens_total`` (TGI and Triton
export no such counter).

Counts are summed over every label set (vLLM's ``engine`` label for data-parallel engines,
models, ranks); cache usage, a fraction per engine, is their mean. An unknown engine name is
detected from the page. A page with none of the engine's queue metrics is an error, so a
misconfigured ``engine`` never reads as an idle server.

KV capacity in tokens, where the page has it: vLLM's ``vllm:cache_config_info`` labels
(``kv_cache_size_tokens``, else ``num_gpu_blocks`` x ``block_size``), SGLang's
``sglang:max_total_num_tokens``, TGI's ``tgi_batch_max_total_tokens``.

LoRA adapters one batch may use, where the page says: vLLM's ``vllm:lora_requests_info``
``max_lora`` label (the largest over its engines), and the adapters of its running and
waiting requests (``running_lora_adapters``, ``waiting_lora_adapters``: comma-separated
names); absent without ``--enable-lora``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from engines.errors import EngineDataError


@dataclass(frozen=True)
class EngineMetrics:
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    cache_usage: tuple[str, ...]  # first one present wins
    generation_tokens: tuple[str, ...] = ()  # cumulative output tokens, summed


ENGINES: dict[str, EngineMetrics] = {
    "vllm": EngineMetrics(
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        generation_tokens=("vllm:generation_tokens_total",),
    ),
    "sglang": EngineMetrics(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        cache_usage=("sglang:token_usage",),
        generation_tokens=("sglang:generation_tokens_total",),
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
KV_TOTAL_GAUGES = ("sglang:max_total_num_tokens", "tgi_batch_max_total_tokens")
KV_CONFIG_INFO = "vllm:cache_config_info"
LORA_INFO = "vllm:lora_requests_info"
# every name parse_load reads: a real engine's page is mostly histograms it does not need
LOAD_NAMES = tuple(sorted(
    {n for m in ENGINES.values()
     for n in (*m.waiting, *m.running, *m.cache_usage, *m.generation_tokens)}
    | {*KV_TOTAL_GAUGES, KV_CONFIG_INFO, LORA_INFO}
))


@dataclass(frozen=True)
class EngineLoad:
    """What a metrics page says of the server's load right now (and, if it says, its KV
    capacity in tokens and the output tokens it has generated since it started)."""

    engine: str
    waiting: float
    running: float | None  # None: the engine does not report it (Triton)
    cache_usage: float | None
    kv_tokens: int | None = None
    generation_tokens: float | None = None  # None: the page has no such counter
    max_loras: int | None = None  # None: the page does not say (no LoRA, or not vLLM)
    lora_running: frozenset[str] = frozenset()  # adapters of its running requests
    lora_waiting: frozenset[str] = frozenset()  # and of its waiting ones


@dataclass(frozen=True)
class _Sample:
    name: str
    labels: dict[str, str]
    value: float


def _samples(text: str) -> list[_Sample]:
    if not text.endswith("\n"):
        text += "\n"
    try:
        return [_Sample(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as exc:
        raise EngineDataError(f"not Prometheus text: {exc}") from exc


def samples_by_name(text: str) -> dict[str, list[float]]:
    """Every sample value of a Prometheus text page, by sample name."""
    values: dict[str, list[float]] = {}
    for sample in _samples(text):
        values.setdefault(sample.name, []).append(sample.value)
    return values


def detect_engine(values: dict[str, list[float]]) -> str | None:
    for engine, metrics in ENGINES.items():
        if any(name in values for name in metrics.waiting):
            return engine
    return None


def parse_load(text: str, engine: str | None) -> EngineLoad:
    """The load a metrics page reports, read with ``engine``'s metric names (detected from
    the page when ``engine`` is None or unknown)."""
    wanted = "".join(line + "\n" for line in text.splitlines() if line.startswith(LOAD_NAMES))
    samples = _samples(wanted or text)  # the whole page only to say what is wrong with it
    values: dict[str, list[float]] = {}
    for sample in samples:
        values.setdefault(sample.name, []).append(sample.value)
    if engine not in ENGINES:
        detected = detect_engine(values)
        if detected is None:
            raise EngineDataError(
                f"unknown engine {engine!r} and no known engine's metrics found")
        engine = detected
    metrics = ENGINES[engine]
    if not any(name in values for name in metrics.waiting):
        expected = ", ".join(metrics.waiting)
        raise EngineDataError(f"engine {engine}: none of {expected} in the metrics page")
    cache: float | None = None
    for name in metrics.cache_usage:
        if values.get(name):
            cache = sum(values[name]) / len(values[name])
            break
    running = (sum(sum(values.get(name, ())) for name in metrics.running)
               if metrics.running else None)
    generated = [v for name in metrics.generation_tokens for v in values.get(name, ())]
    return EngineLoad(
        engine=engine,
        waiting=sum(sum(values.get(name, ())) for name in metrics.waiting),
        running=running,
        cache_usage=cache,
        kv_tokens=_kv_tokens(samples),
        generation_tokens=sum(generated) if generated else None,
        **_lora(samples),
    )


def _lora(samples: list[_Sample]) -> dict[str, Any]:
    """``max_loras`` and the running and waiting adapters, from the latest sample of
    each engine's ``vllm:lora_requests_info`` (its value is the time it was set)."""
    latest: dict[str, _Sample] = {}
    for sample in samples:
        if sample.name == LORA_INFO and "max_lora" in sample.labels:
            engine = sample.labels.get("engine", "")
            if engine not in latest or sample.value >= latest[engine].value:
                latest[engine] = sample
    limits, running, waiting = [], set(), set()
    for sample in latest.values():
        with contextlib.suppress(ValueError):
            limits.append(int(sample.labels["max_lora"]))
        running.update(_names(sample.labels.get("running_lora_adapters", "")))
        waiting.update(_names(sample.labels.get("waiting_lora_adapters", "")))
    return {"max_loras": max(limits) if limits else None,
            "lora_running": frozenset(running), "lora_waiting": frozenset(waiting)}


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def _kv_tokens(samples: list[_Sample]) -> int | None:
    total = 0.0
    for sample in samples:
        if sample.name == KV_CONFIG_INFO:
            labels = sample.labels
            try:
                if labels.get("kv_cache_size_tokens") not in (None, "", "None"):
                    total += float(labels["kv_cache_size_tokens"])
                else:
                    total += float(labels["num_gpu_blocks"]) * float(labels["block_size"])
            except (KeyError, ValueError):
                continue
        elif sample.name in KV_TOTAL_GAUGES:
            total += sample.value
    return int(total) if total > 0 else None
