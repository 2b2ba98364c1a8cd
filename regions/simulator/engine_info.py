# SPDX-License-Identifier: Apache-2.0
"""What a simulated server publishes about its limits, shaped as the engine it stands for
publishes it (sources in ``docs/research/engine-capacity-signals.md``):

- vLLM: no slot count anywhere; ``vllm:cache_config_info`` (a gauge at 1 whose labels are
  the cache config: ``block_size`` 16, ``num_gpu_blocks``, ``kv_cache_size_tokens``) on
  ``/metrics``;
- SGLang: ``GET /v1/loads`` with one object per data-parallel rank (``num_running_reqs``,
  ``num_waiting_reqs``, ``max_running_requests``, ``max_total_num_tokens``,
  ``token_usage``), and ``sglang:max_total_num_tokens`` on ``/metrics``;
- TGI: ``GET /info`` with ``max_concurrent_requests`` (default 128): a request beyond that
  many in flight (queued or running) is refused with 429 ``Model is overloaded``, as TGI's
  router does; ``tgi_batch_max_total_tokens`` on ``/metrics``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from regions.simulator.engine import Engine

TGI_MAX_CONCURRENT_REQUESTS = 128  # TGI's launcher default


def sglang_loads(engine: Engine) -> dict[str, Any]:
    """The body of SGLang's ``GET /v1/loads`` (one rank)."""
    state, config = engine.state(), engine.config
    return {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(),
        "version": "sim",
        "loads": [{
            "dp_rank": 0,
            "num_running_reqs": state.running,
            "num_waiting_reqs": state.waiting,
            "num_used_tokens": state.kv_used_tokens,
            "num_total_tokens": state.kv_capacity_tokens,
            "max_total_num_tokens": config.kv_cache_tokens,
            "max_running_requests": config.max_num_seqs,
            "token_usage": state.kv_usage,
        }],
    }


def tgi_info(model: str, engine: Engine, max_concurrent_requests: int) -> dict[str, Any]:
    """The body of TGI's ``GET /info``."""
    config = engine.config
    return {
        "model_id": model,
        "model_sha": None,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": max_concurrent_requests,
        "max_best_of": 2,
        "max_stop_sequences": 4,
        "max_input_tokens": config.max_model_len - 1,
        "max_total_tokens": config.max_model_len,
        "validation_workers": 2,
        "max_client_batch_size": 4,
        "router": "text-generation-router",
        "version": "sim",
    }


def kv_gauges(engine_name: str, engine: Engine) -> Iterator[Metric]:
    """The KV capacity gauges of ``engine_name``'s metrics page."""
    tokens = engine.config.kv_cache_tokens
    if engine_name == "vllm":
        info = GaugeMetricFamily("vllm:cache_config_info",
                                 "Information of the LLMEngine CacheConfig",
                                 labels=["block_size", "enable_prefix_caching", "engine",
                                         "kv_cache_size_tokens", "num_gpu_blocks"])
        block = engine.config.block_size
        info.add_metric([str(block), str(engine.config.prefix_caching), "0", str(tokens),
                         str(tokens // block)], 1.0)
        yield info
    elif engine_name == "sglang":
        total = GaugeMetricFamily("sglang:max_total_num_tokens",
                                  "Maximum total number of tokens in the KV cache pool.")
        total.add_metric([], tokens)
        yield total
    elif engine_name == "tgi":
        total = GaugeMetricFamily("tgi_batch_max_total_tokens", "")
        total.add_metric([], tokens)
        yield total
