from __future__ import annotations

import pytest
from fake_gpu import FIXTURES, FakeGpu

from state import StateStore
from workers.errors import MetricsError
from workers.probes.metrics_scrape import parse_load, scrape_gpu_metrics
from workers.targets import GpuTarget


@pytest.mark.parametrize(
    ("fixture", "engine", "waiting", "running", "cache"),
    [
        pytest.param("vllm.prom", "vllm", 4.0, 12.0, 0.4, id="vllm-two-engines"),
        pytest.param("vllm_legacy.prom", "vllm", 4.0, 12.0, 0.81, id="vllm-legacy-cache"),
        pytest.param("sglang.prom", "sglang", 6.0, 9.0, 0.62, id="sglang"),
        pytest.param("tgi.prom", "tgi", 4.0, 8.0, None, id="tgi"),
        pytest.param("triton.prom", "triton", 7.0, 0.0, None, id="triton"),
        pytest.param("sglang.prom", "custom-build", 6.0, 9.0, 0.62, id="detected-engine"),
    ],
)
def test_parse_load(fixture: str, engine: str, waiting, running, cache) -> None:
    load = parse_load((FIXTURES / fixture).read_text(), engine, now=5.0)
    assert (load.waiting, load.running) == (waiting, running)
    assert (
        load.cache_usage == pytest.approx(cache) if cache is not None else load.cache_usage is None
    )
    assert load.timestamp == 5.0


def test_wrong_engine_is_an_error_not_an_idle_server() -> None:
    with pytest.raises(MetricsError, match="engine tgi: none of tgi_queue_size"):
        parse_load((FIXTURES / "vllm.prom").read_text(), "tgi")


def test_not_prometheus_text() -> None:
    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse_load('{"json": "no"}\n', "vllm")


def test_unknown_engine_without_known_metrics() -> None:
    with pytest.raises(MetricsError, match="unknown engine"):
        parse_load("# TYPE x gauge\nx 1\n", "mystery")


def _target(url: str, metrics_path: str | None = "/metrics") -> GpuTarget:
    return GpuTarget("eu", "g1", url, "vllm", "/health", 200, metrics_path, 1.0, 0.5, 2, 3)


def test_scrape_stores_the_load(store: StateStore, fake_gpu: FakeGpu) -> None:
    fake_gpu.metrics = (FIXTURES / "vllm.prom").read_text()
    load = scrape_gpu_metrics(store, _target(fake_gpu.url))
    assert load is not None and store.gpu_load("eu", "g1") == load


def test_scrape_errors_name_the_url(store: StateStore, fake_gpu: FakeGpu) -> None:
    with pytest.raises(MetricsError, match="/nope: status 404"):
        scrape_gpu_metrics(store, _target(fake_gpu.url, "/nope"))
    assert scrape_gpu_metrics(store, _target(fake_gpu.url, None)) is None
    assert store.gpu_load("eu", "g1") is None
