# SPDX-License-Identifier: Apache-2.0
"""Scraped GPU load: the ``scraped-load`` scorer (table), the pool's scraped values, and the
way from a GPU server's ``/metrics`` through the workers' scrape and a real Valkey into the
balancer's snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from regions.balancer import (
    BackendSpec,
    Balancer,
    BalancerConfig,
    SharedStateConfig,
    build_balancer,
)
from regions.balancer.scheduling.backend import ScrapedLoad
from regions.balancer.scheduling.backends import BackendPool
from regions.balancer.scheduling.registry import Registry, register_builtin_plugins
from regions.balancer.scheduling.scorers.scraped_load import ScrapedLoadScorer
from regions.simulator import EngineConfig, Fleet, ServerSpec
from routing import Kind, RegistryError
from state import EmbeddedValkey, StateStore
from state.records import GpuLoad
from tests.balancer.helpers import MODEL, completion, req, snap, stack
from tests.run_clock import eventually
from workers.probes.metrics_scrape import scrape_gpu_metrics
from workers.targets import GpuTarget

REGION = "test-region"  # the region tests.balancer.helpers.stack builds

# the load as the probe workers store it; the balancer's own scraping (on by default, and
# then preferred) is off in these tests
FROM_STATE = BalancerConfig(scrape_every_s=0)


def shared(url: str, prefix: str, **overrides: float) -> SharedStateConfig:
    fields = {"publish_every_s": 0.2, "read_every_s": 0.1, "timeout_s": 0.5}
    fields.update(overrides)
    return SharedStateConfig(url, prefix=prefix, **fields)


def loaded(name: str, index: int, kv: float | None, waiting: float | None):
    return snap(name, index, kv_usage=kv, waiting=waiting)


SCORER_CASES = [
    ("idle", ScrapedLoadScorer(), [loaded("a", 0, 0.0, 0.0)], [1.0]),
    # (1 - 0.5 + 4/(4+4)) / 2 = 0.5
    ("half-cache-scale-queue", ScrapedLoadScorer(), [loaded("a", 0, 0.5, 4.0)], [0.5]),
    (
        "lower-cache-wins",
        ScrapedLoadScorer(),
        [loaded("a", 0, 0.2, 0.0), loaded("b", 1, 0.9, 0.0)],
        [0.9, 0.55],
    ),
    (
        "fewer-waiting-wins",
        ScrapedLoadScorer(),
        [loaded("a", 0, 0.0, 0.0), loaded("b", 1, 0.0, 12.0)],
        [1.0, 0.625],
    ),
    (
        "cache-clamped",
        ScrapedLoadScorer(),
        [loaded("a", 0, 1.3, 0.0), loaded("b", 1, -0.1, 0.0)],
        [0.5, 1.0],
    ),
    # an unknown term takes the median of the others' terms: cache (0.8 + 0.2) / 2 = 0.5,
    # queue (1 + 1/3) / 2 = 2/3, so c scores (0.5 + 2/3) / 2
    (
        "unknown-is-median",
        ScrapedLoadScorer(),
        [loaded("a", 0, 0.2, 0.0), loaded("b", 1, 0.8, 8.0), loaded("c", 2, None, None)],
        [0.9, 0.26666667, 0.58333333],
    ),
    (
        "nothing-known-is-flat",
        ScrapedLoadScorer(),
        [loaded("a", 0, None, None), loaded("b", 1, None, None)],
        [1.0, 1.0],
    ),
    # an engine without a cache metric: only the queue term tells them apart
    (
        "no-cache-metric",
        ScrapedLoadScorer(),
        [loaded("a", 0, None, 0.0), loaded("b", 1, None, 4.0)],
        [1.0, 0.75],
    ),
    (
        "kv-only",
        ScrapedLoadScorer(queue_weight=0.0),
        [loaded("a", 0, 0.25, 100.0), loaded("b", 1, 0.75, 0.0)],
        [0.75, 0.25],
    ),
    (
        "queue-scale",
        ScrapedLoadScorer(kv_weight=0.0, queue_scale=1.0),
        [loaded("a", 0, 0.9, 1.0), loaded("b", 1, 0.0, 3.0)],
        [0.5, 0.25],
    ),
]


@pytest.mark.parametrize(
    ("plugin", "candidates", "expected"),
    [c[1:] for c in SCORER_CASES],
    ids=[c[0] for c in SCORER_CASES],
)
def test_scraped_load_scorer(plugin, candidates, expected) -> None:
    assert plugin.score(req(), candidates) == pytest.approx(expected)


@pytest.mark.parametrize(
    "params", [{"kv_weight": 0.0, "queue_weight": 0.0}, {"kv_weight": -1.0}, {"queue_scale": 0}]
)
def test_bad_parameters_are_refused(params) -> None:
    registry = register_builtin_plugins(Registry())
    with pytest.raises(RegistryError, match="scorer 'scraped-load'"):
        registry.create(Kind.SCORER, "scraped-load", params)


def test_scraped_values_reach_the_snapshot() -> None:
    specs = [BackendSpec(f"b{i}", f"http://127.0.0.1:{9000 + i}", ("m",), 4) for i in range(2)]
    pool = BackendPool(specs)
    first = pool.snapshot()
    assert (first.backends[0].waiting, first.backends[0].kv_usage) == (None, None)
    pool.set_scraped("b0", ScrapedLoad())
    assert pool.snapshot() is first  # unchanged: nothing rebuilt
    pool.set_scraped("b0", ScrapedLoad(waiting=3.0, running=16.0, kv_usage=0.7))
    view = pool.snapshot().backends[0]
    assert (view.waiting, view.running, view.kv_usage) == (3.0, 16.0, 0.7)
    pool.set_scraped("b0", ScrapedLoad())
    assert pool.snapshot().backends[0].kv_usage is None


def views(balancer: Balancer) -> dict[str, tuple[float | None, float | None, float | None]]:
    return {v.name: (v.waiting, v.running, v.kv_usage) for v in balancer.pool.snapshot().backends}


async def test_scraped_load_in_valkey_reaches_the_snapshot_unless_stale(
    valkey: EmbeddedValkey, prefix: str, store: StateStore
) -> None:
    config = shared(valkey.url, prefix, load_stale_after_s=5.0)
    async with stack((1.0, 1.0, 1.0), shared_state=config, config=FROM_STATE) as (
            _, balancer, _client):
        now = time.time()
        store.write_gpu_load(REGION, "gpu0", GpuLoad("vllm", 3.0, 16.0, 0.75, now))
        store.write_gpu_load(REGION, "gpu1", GpuLoad("tgi", 1.0, 2.0, None, now))
        store.write_gpu_load(REGION, "gpu2", GpuLoad("vllm", 9.0, 9.0, 0.9, now - 6.0))
        await eventually(lambda: views(balancer)["gpu0"] == (3.0, 16.0, 0.75))
        assert views(balancer)["gpu1"] == (1.0, 2.0, None)  # no cache metric
        assert views(balancer)["gpu2"] == (None, None, None)  # 6 s old: not believed

        store.write_gpu_load(REGION, "gpu0", GpuLoad("vllm", 0.0, 4.0, 0.25, time.time()))
        await eventually(lambda: views(balancer)["gpu0"] == (0.0, 4.0, 0.25))
        store.client.delete(store.keys.gpu_load(REGION, "gpu1"))
        await eventually(lambda: views(balancer)["gpu1"] == (None, None, None))


async def test_scraped_load_ages_out_while_valkey_is_unreachable(prefix: str) -> None:
    server = EmbeddedValkey().start()
    try:
        config = shared(server.url, prefix, load_stale_after_s=1.0)
        async with stack(shared_state=config, config=FROM_STATE) as (_, balancer, _client):
            writer = StateStore.from_url(server.url, prefix=prefix)
            writer.write_gpu_load(REGION, "gpu0", GpuLoad("vllm", 2.0, 3.0, 0.5, time.time()))
            writer.close()
            await eventually(lambda: views(balancer)["gpu0"] == (2.0, 3.0, 0.5))
            server.stop()
            await eventually(lambda: balancer.link.reachable is False)
            await eventually(lambda: views(balancer)["gpu0"] == (None, None, None))
    finally:
        server.stop()


def target(name: str, url: str) -> GpuTarget:
    """What the workers scrape for one GPU server (vLLM metric names, ``/metrics``)."""
    return GpuTarget(REGION, name, url, "vllm", "/health", 200, "/metrics", 1.0, 1.0, 2, 3)


@asynccontextmanager
async def busy_fleet_behind(
    config: BalancerConfig, shared_state: SharedStateConfig
) -> AsyncIterator[tuple[Fleet, Balancer]]:
    """gpu0 runs one sequence at a time, so extra requests wait in its own queue."""
    specs = [
        ServerSpec("gpu0", models=(MODEL,), engine=EngineConfig(max_num_seqs=1)),
        ServerSpec("gpu1", models=(MODEL,)),
    ]
    async with Fleet(specs, time_scale=1.0) as fleet:
        backends = [BackendSpec(s.spec.name, s.url, (MODEL,), 16) for s in fleet]
        balancer = build_balancer(
            REGION, backends, dataclasses.replace(config, shared_state=shared_state)
        )
        async with balancer:
            yield fleet, balancer


async def test_a_servers_metrics_scraped_by_the_workers_steer_the_scorer(
    valkey: EmbeddedValkey, prefix: str, store: StateStore
) -> None:
    config = BalancerConfig(scorers=(("scraped-load", 1.0),), scrape_every_s=0)
    async with busy_fleet_behind(config, shared(valkey.url, prefix)) as (fleet, balancer):
        async with aiohttp.ClientSession() as direct:  # load gpu0 around the balancer
            url = fleet["gpu0"].url + "/v1/completions"
            held = [await direct.post(url, json=completion(1000)) for _ in range(3)]
            try:
                await eventually(lambda: fleet["gpu0"].engine.state().waiting == 2)
                for server in fleet:
                    scrape = target(server.spec.name, server.url)
                    await asyncio.to_thread(scrape_gpu_metrics, store, scrape)
            finally:
                for resp in held:
                    resp.close()
        await eventually(lambda: None not in views(balancer)["gpu1"])
        assert views(balancer)["gpu1"] == (0.0, 0.0, 0.0)
        waiting, running, kv = views(balancer)["gpu0"]
        assert (waiting, running) == (2.0, 1.0)
        assert kv is not None and kv > 0
        decision = balancer.explain("/v1/completions", completion(2))
        scores = next(s for s in decision["steps"] if s["stage"] == "scorer")["scores"]
        # gpu0: (1 - kv + 4 / (4 + 2)) / 2, about 0.83
        assert scores["gpu1"] == 1.0 and scores["gpu0"] < 0.85
        assert decision["chosen"] == "gpu1"
