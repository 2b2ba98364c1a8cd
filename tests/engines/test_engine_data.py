"""``engines``: metrics pages and info documents as the real engines publish them (fixtures
built from their source, see docs/research/engine-capacity-signals.md) and as the simulator
serves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines import EngineDataError, EngineLimits, limits_from_info, parse_load

FIXTURES = Path(__file__).resolve().parents[1] / "workers" / "fixtures"

VLLM_0_33 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_running{engine="1",model_name="m"} 11.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.92",\
kv_cache_max_concurrency="3.29",kv_cache_size_tokens="432000",num_gpu_blocks="27000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",gpu_memory_utilization="0.92",\
kv_cache_max_concurrency="3.29",kv_cache_size_tokens="None",num_gpu_blocks="1000"} 1.0
"""


def test_vllm_sums_data_parallel_engines_and_reads_the_kv_capacity() -> None:
    load = parse_load(VLLM_0_33, "vllm")
    assert (load.engine, load.running, load.waiting) == ("vllm", 23.0, 3.0)
    assert load.cache_usage == pytest.approx(0.4)
    assert load.kv_tokens == 432_000 + 1000 * 16  # the product where the size is absent


LORA_INFO = """\
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,support",\
waiting_lora_adapters="legal"} 1.7899e+09
vllm:lora_requests_info{max_lora="oops",running_lora_adapters="",waiting_lora_adapters=""} 1.0
"""


def test_vllm_lora_batch_limit_is_read_where_the_page_says_it() -> None:
    load = parse_load(VLLM_0_33 + LORA_INFO, "vllm")
    assert load.max_loras == 4  # the latest sample; a garbled one does not count
    assert (load.lora_running, load.lora_waiting) == ({"sql", "support"}, {"legal"})
    assert parse_load(VLLM_0_33, "vllm").max_loras is None  # no --enable-lora


@pytest.mark.parametrize(("fixture", "engine", "running"), [
    ("vllm.prom", "vllm", 12.0), ("sglang.prom", "sglang", None), ("tgi.prom", "tgi", None),
    ("triton.prom", "triton", None)])
def test_fixtures_parse(fixture: str, engine: str, running) -> None:
    load = parse_load((FIXTURES / fixture).read_text(), None)  # detected from the page
    assert load.engine == engine
    if engine == "triton":
        assert load.running is None
    if running is not None:
        assert load.running == running


def test_a_page_without_the_engines_metrics_is_an_error() -> None:
    with pytest.raises(EngineDataError, match="none of tgi_queue_size"):
        parse_load((FIXTURES / "vllm.prom").read_text(), "tgi")
    with pytest.raises(EngineDataError, match="not Prometheus text"):
        parse_load('{"json": "no"}\n', "vllm")


SGLANG_LOADS = {"timestamp": "2026-11-25T00:00:00+00:00", "version": "0.5.23", "loads": [
    {"dp_rank": 0, "num_running_reqs": 40, "num_waiting_reqs": 2, "max_running_requests": 48,
     "max_total_num_tokens": 500_000, "token_usage": 0.4},
    {"dp_rank": 1, "num_running_reqs": 41, "num_waiting_reqs": 0, "max_running_requests": 48,
     "max_total_num_tokens": 500_000, "token_usage": 0.4}]}


@pytest.mark.parametrize(("engine", "document", "limits"), [
    ("sglang", SGLANG_LOADS, EngineLimits(max_running=96, kv_tokens=1_000_000)),
    ("sglang", {"loads": [{"dp_rank": 0, "max_running_requests": None}]}, EngineLimits()),
    ("tgi", {"model_id": "m", "max_concurrent_requests": 128, "max_total_tokens": 4096},
     EngineLimits(max_in_flight=128)),
    ("tgi", {"model_id": "m"}, EngineLimits()),
    ("vllm", {}, EngineLimits()),
], ids=["sglang-two-ranks", "sglang-unset", "tgi", "tgi-absent", "vllm-none"])
def test_limits_from_info(engine: str, document, limits: EngineLimits) -> None:
    assert limits_from_info(engine, document) == limits


@pytest.mark.parametrize("document", [[], "x", {"loads": "no"}, {"loads": []}])
def test_garbage_info_is_an_error(document) -> None:
    with pytest.raises(EngineDataError):
        limits_from_info("sglang", document)
