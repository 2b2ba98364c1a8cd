# SPDX-License-Identifier: Apache-2.0
"""``/metrics``: vLLM names and labels, parsed by prometheus_client's own parser."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

import engines
from engines import EngineLimits, limits_from_info
from regions.simulator.config import EngineConfig
from regions.simulator.errors import SimConfigError
from regions.simulator.fleet import ServerSpec, SimServer
from state.records import GpuLoad
from workers.probes.metrics_scrape import parse_load

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
            if s.name == "vllm:cache_config_info":  # vLLM labels it with the cache config only
                assert s.labels["block_size"] == "16" and s.value == 1.0
                continue
            assert s.labels["model_name"] == MODEL
            key = s.name + (f"[{s.labels['le']}]" if "le" in s.labels else "")
            samples[key] = s.value
    return samples


async def test_gauges_show_running_waiting_and_kv_under_load() -> None:
    async with running_server(max_num_seqs=2, kv_cache_tokens=32_768, time_scale=20) as (
            _, http):
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


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "triton"])
async def test_each_engines_names_are_read_back_by_the_probe_workers_scraper(engine) -> None:
    """Under load, the page a server simulating ``engine`` exports is what the workers'
    scraper reads with that engine's names: same queue, same batch where it has one."""
    async with running_server(max_num_seqs=2, time_scale=20, engine_name=engine) as (_, http):
        body = completion(1000, 2000, stream=True)
        streams = [await http.post("/v1/completions", json=body) for _ in range(5)]

        async def loaded() -> GpuLoad | None:
            async with http.get("/metrics") as resp:
                load = parse_load(await resp.text(), engine)
            return load if load.waiting == 3 else None

        load = await eventually(loaded)
        for resp in streams:
            resp.close()
    assert load.engine == engine
    assert load.running == (0 if engine == "triton" else 2)  # Triton exports no batch size
    assert (load.cache_usage is not None) == (engine in ("vllm", "sglang"))


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(SimConfigError, match="engine: 'ollama' is not one of"):
        ServerSpec("x", engine_name="ollama")


@pytest.mark.parametrize(("engine_name", "path", "limits"), [
    ("sglang", "/v1/loads", EngineLimits(max_running=24, kv_tokens=65_536)),
    ("tgi", "/info", EngineLimits(max_in_flight=128)),
])
async def test_info_endpoints_publish_the_limits_as_the_engine_does(
        engine_name: str, path: str, limits: EngineLimits) -> None:
    async with running_server(engine_name=engine_name, max_num_seqs=24,
                              kv_cache_tokens=65_536) as (_, http):
        async with http.get(path) as resp:
            assert resp.status == 200
            assert limits_from_info(engine_name, await resp.json()) == limits
        async with http.get("/metrics") as resp:
            assert engines.parse_load(await resp.text(), engine_name).kv_tokens == 65_536
        other = "/info" if path == "/v1/loads" else "/v1/loads"
        async with http.get(other) as resp:
            assert resp.status == 404  # only the engine's own endpoint


async def test_vllm_publishes_its_kv_capacity_but_no_slot_count() -> None:
    async with running_server(max_num_seqs=24, kv_cache_tokens=65_536) as (_, http):
        async with http.get("/metrics") as resp:
            text = await resp.text()
        assert engines.parse_load(text, "vllm").kv_tokens == 65_536
        assert "24" not in text.split("cache_config_info")[1].split("\n")[1]


async def test_tgi_refuses_beyond_its_concurrent_request_limit() -> None:
    spec = ServerSpec("tgi", models=(MODEL,), engine=EngineConfig(max_num_seqs=2),
                      engine_name="tgi", max_concurrent_requests=3)
    server = SimServer(spec, time_scale=20)
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as http:
            body = completion(100, 2000, stream=True)
            streams = [await http.post("/v1/completions", json=body) for _ in range(3)]
            async with http.post("/v1/completions", json=body) as refused:
                assert refused.status == 429
                assert (await refused.json())["error"]["type"] == "overloaded"
            for stream in streams:
                stream.close()
    finally:
        await server.stop()


async def test_prefix_cache_hits_are_counted_in_tokens_under_vllms_names() -> None:
    prompt = "".join(f"word{i:05d} " for i in range(200))  # 2,000 characters: 500 tokens
    chat_turn = [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}]
    async with running_server(time_scale=50) as (_, http):
        for _ in range(2):
            async with http.post("/v1/completions", json={
                    "model": MODEL, "prompt": prompt, "max_tokens": 2}) as resp:
                assert resp.status == 200
        for messages in (chat_turn, [*chat_turn, {"role": "assistant", "content": "ok"},
                                     {"role": "user", "content": "more"}]):
            async with http.post("/v1/chat/completions", json={
                    "model": MODEL, "messages": messages, "max_tokens": 2}) as resp:
                assert resp.status == 200
        m = await scrape(http)
    # completions: 500 + 500 queried, the second finds 31 of its 31 full blocks (496 tokens);
    # chat: the second turn finds the first turn's full blocks (31 of them)
    assert m["vllm:prefix_cache_queries_total"] == 500 + 500 + 509 + 518
    assert m["vllm:prefix_cache_hits_total"] == 496 + 496


async def test_vllm_serves_its_version_and_forgets_its_prefix_cache_on_request() -> None:
    prompt = "".join(f"word{i:05d} " for i in range(200))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    async with running_server(time_scale=50) as (server, http):
        async with http.get("/version") as resp:
            assert resp.status == 200 and "version" in await resp.json()
        async with http.post("/v1/completions", json=body) as resp:
            assert resp.status == 200
        assert server.engine.state().prefix_cached_blocks == 31
        async with http.post("/reset_prefix_cache") as resp:
            assert resp.status == 200
        assert server.engine.state().prefix_cached_blocks == 0
        async with http.post("/v1/completions", json=body) as resp:
            assert resp.status == 200
        assert (await scrape(http))["vllm:prefix_cache_hits_total"] == 0
