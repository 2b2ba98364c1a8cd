# SPDX-License-Identifier: Apache-2.0
"""``/metrics``: vLLM names and labels, parsed by prometheus_client's own parser."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .helpers import MODEL, completion, eventually, running_server


async def scrape(http: aiohttp.ClientSession) -> dict[str, float]:
    """Every sample as ``name{model_name}`` (or ``name{model_name,le}``) -> value."""
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert s.labels["model_name"] == MODEL
            key = s.name + (f"[{s.labels['le']}]" if "le" in s.labels else "")
            samples[key] = s.value
    return samples


async def test_gauges_show_running_waiting_and_kv_under_load() -> None:
    async with running_server(max_num_seqs=2, time_scale=20) as (_, http):
        body = completion(1000, 2000, stream=True)
        streams = [await http.post("/v1/completions", json=body) for _ in range(5)]

        async def loaded() -> dict[str, float] | None:
            m = await scrape(http)
            return m if m["vllm:num_requests_waiting"] == 3 else None

        m = await eventually(loaded)
        assert m["vllm:num_requests_running"] == 2
        assert 0 < m["vllm:kv_cache_usage_perc"] <= 1
        assert m["vllm:kv_cache_usage_perc"] * 32_768 >= 2000
        for resp in streams:
            resp.close()


async def test_counters_and_histograms_after_requests() -> None:
    async with running_server() as (_, http):
        bodies = [completion(100 * (i + 1), 5 + i) for i in range(3)]
        await asyncio.gather(*(http.post("/v1/completions", json=b) for b in bodies))

        async def counted() -> dict[str, float] | None:
            m = await scrape(http)
            return m if m["vllm:e2e_request_latency_seconds_count"] == 3 else None

        m = await eventually(counted)
    assert m["vllm:prompt_tokens_total"] == 600
    assert m["vllm:generation_tokens_total"] == 5 + 6 + 7
    assert m["vllm:time_to_first_token_seconds_count"] == 3
    assert m["vllm:time_to_first_token_seconds_bucket[+Inf]"] == 3
    assert m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
    # model seconds: prefill >= 100 tokens at 16,000 tokens/s
    assert m["vllm:time_to_first_token_seconds_sum"] >= 3 * 100 / 16_000
