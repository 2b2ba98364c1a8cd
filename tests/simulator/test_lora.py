# SPDX-License-Identifier: Apache-2.0
"""LoRA adapters in the simulator: the batch's adapter limit, loads and evictions, and
vLLM's runtime API over real HTTP."""

from __future__ import annotations

import asyncio

import pytest

from regions.simulator.adapter_cache import AdapterCache
from regions.simulator.batching import Scheduler, SeqState
from regions.simulator.config import EngineConfig
from regions.simulator.errors import SimConfigError
from tests.simulator.helpers import MODEL, completion, running_server

# round figures, and no context cost: these examples are about batching
ROUND = {"prefill_tokens_per_s": 1000.0, "decode_base_ms": 10.0,
         "decode_context_ms_per_ktoken": 0.0, "decode_alpha": 0.0,
         "kv_watermark": 0.0, "prefix_caching": False}


def make(**overrides: object) -> Scheduler:
    return Scheduler(EngineConfig(**{**ROUND, **overrides}))


def test_a_batch_runs_at_most_max_loras_adapters_and_the_others_pass_by() -> None:
    s = make(max_loras=2, max_cpu_loras=3)
    a, b, c = (s.submit(100, 5, 0.0, adapter=name) for name in "abc")
    base = s.submit(100, 5, 0.0)
    a2 = s.submit(100, 5, 0.0, adapter="a")
    s.plan()
    assert [q.state for q in (a, b, c, base, a2)] == [
        SeqState.RUNNING, SeqState.RUNNING, SeqState.WAITING, SeqState.RUNNING,
        SeqState.RUNNING]
    assert list(s.waiting) == [c]  # passed by, it kept its place
    s.abort(a)
    s.abort(a2)
    s.plan()
    assert c.state is SeqState.RUNNING


def test_an_adapter_not_loaded_makes_its_admission_step_longer_once() -> None:
    s = make(max_loras=1, lora_load_s=0.5)
    s.submit(100, 2, 0.0, adapter="a")
    step = s.plan()
    assert step is not None and step.loaded == ("a",)
    assert step.duration == pytest.approx(0.1 + 0.5)  # 100 tokens at 1,000/s, then the load
    s.complete(step, step.duration)
    s.submit(100, 2, 0.0, adapter="a")
    while (step := s.plan()) is not None:
        assert step.loaded == ()
        s.complete(step, 1.0)
    assert s.adapters.loads["a"] == 1


def test_the_least_recently_used_adapter_is_evicted_and_loads_again() -> None:
    cache = AdapterCache(slots=2)
    assert cache.load("a") is None and cache.load("b") is None
    assert cache.use("a")  # b is now the least recently used
    assert cache.load("c") == "b"
    assert not cache.use("b") and list(cache.loaded) == ["a", "c"]
    assert cache.remove("a") and not cache.remove("a")
    assert cache.evictions == 1 and cache.loads["b"] == 1


def test_config_refuses_fewer_cpu_slots_than_batch_slots() -> None:
    with pytest.raises(SimConfigError, match="max_cpu_loras"):
        EngineConfig(max_loras=4, max_cpu_loras=2)
    assert EngineConfig(max_loras=4).adapter_slots == 4
    assert EngineConfig(max_loras=2, max_cpu_loras=8).adapter_slots == 8


async def test_runtime_api_loads_lists_serves_and_unloads_an_adapter() -> None:
    async with running_server(max_loras=2, lora_load_s=0.5, time_scale=10.0) as (_,
                                                                                 http):
        load = {"lora_name": "sql", "lora_path": "/adapters/sql-v3"}
        async with http.post("/v1/completions", json=completion(model="sql")) as resp:
            assert resp.status == 404  # not loaded yet
        started = asyncio.get_running_loop().time()
        async with http.post("/v1/load_lora_adapter", json=load) as resp:
            assert resp.status == 200, await resp.text()
            assert await resp.text() == "Success: LoRA adapter 'sql' added successfully."
        assert asyncio.get_running_loop().time() - started >= 0.5 / 10.0 * 0.9
        async with http.post("/v1/load_lora_adapter", json=load) as resp:
            assert resp.status == 400
            assert "already been loaded" in (await resp.json())["error"]["message"]
        async with http.get("/v1/models") as resp:
            listed = {m["id"]: m for m in (await resp.json())["data"]}
        assert listed["sql"]["parent"] == MODEL and listed["sql"]["root"] == "/adapters/sql-v3"
        async with http.post("/v1/completions", json=completion(model="sql")) as resp:
            assert resp.status == 200
            assert (await resp.json())["model"] == "sql"
        async with http.get("/metrics") as resp:
            text = await resp.text()
        assert 'vllm:lora_requests_info{max_lora="2"' in text
        async with http.post("/v1/unload_lora_adapter", json={"lora_name": "sql"}) as resp:
            assert resp.status == 200
        async with http.post("/v1/unload_lora_adapter", json={"lora_name": "sql"}) as resp:
            assert resp.status == 404
        async with http.get("/_sim/state") as resp:
            adapters = (await resp.json())["adapters"]
        assert adapters["loads"] == {"sql": 1} and adapters["registered"] == []


async def test_load_api_refuses_bad_bodies_and_is_absent_without_lora() -> None:
    async with running_server(max_loras=1) as (_, http):
        for body in ({"lora_name": "x"}, {"lora_path": "/p"}, {"lora_name": 3, "lora_path": 4},
                     []):
            async with http.post("/v1/load_lora_adapter", json=body) as resp:
                assert resp.status == 400
        async with http.post("/v1/load_lora_adapter", data=b"{not json") as resp:
            assert resp.status == 400
    async with running_server() as (_, http), http.post("/v1/load_lora_adapter",
                         json={"lora_name": "x", "lora_path": "/p"}) as resp:
        assert resp.status in (404, 405)
