# SPDX-License-Identifier: Apache-2.0
"""The autoscaling signal: desired replicas from home demand (Little's law over a window),
with a dead band, never below what is loading; and as the balancer publishes it (a
Prometheus gauge and the external metrics API's shape)."""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass

import pytest

from regions.balancer import BalancerConfig
from regions.balancer.scheduling.demand import DemandSettings, DemandSignal

from .helpers import MODEL, admin_client, stack


@dataclass
class View:
    """What the signal reads of a server view."""

    models: frozenset[str]
    cap: int = 8
    usable: bool = True
    kv_usage: float | None = None
    in_flight: int = 0


SERVERS = [View(frozenset({"m"})) for _ in range(4)]


def feed(signal: DemandSignal, start: float, seconds: float, rate: float, service_s: float,
         rng: random.Random) -> float:
    """Poisson arrivals at ``rate`` for ``seconds``, each ending ``service_s`` later."""
    now = start
    while True:
        now += rng.expovariate(rate)
        if now >= start + seconds:
            return start + seconds
        signal.arrived("m", now)
        signal.ended("m", now, service_s)


def test_desired_follows_littles_law() -> None:
    signal = DemandSignal(DemandSettings(window_s=10, target=0.8))
    for i in range(100):  # 10 requests a second of 4 s each: 40 at once
        signal.arrived("m", i / 10)
        signal.ended("m", i / 10, 4.0)
    reading = signal.read("m", SERVERS, 10.0)
    assert abs(reading.home_rate - 10.0) < 1e-9
    assert abs(reading.needed - 40 / (8 * 0.8)) < 1e-9  # 6.25 servers of 8
    assert reading.desired == 7 and reading.servers == 4 and reading.capacity == 8


@pytest.mark.parametrize("seed", range(8))
def test_a_step_shows_within_two_scrapes_and_a_constant_load_does_not_oscillate(
        seed: int) -> None:
    """Scraped every 15 s: a doubling shows within two scrapes, and two minutes of a
    constant load change the signal at most twice (it settles)."""
    rng = random.Random(seed)
    signal = DemandSignal(DemandSettings(window_s=15))
    now, readings = 0.0, []
    for second in range(300):  # 5 requests a second of 6 s: needs 30 / 6.4 = 4.7
        rate = 5.0 if second < 150 else 10.0  # then twice as many: 9.4
        now = feed(signal, now, 1.0, rate, 6.0, rng)
        readings.append(signal.read("m", SERVERS, now).desired)
    steady = readings[30:150]
    changes = sum(1 for a, b in itertools.pairwise(steady) if a != b)
    assert changes <= 2, f"oscillates: {changes} changes in two minutes of constant load"
    assert min(steady) >= 4 and max(steady) <= 7  # about ceil(4.7), with headroom
    after = next(i for i in range(150, 300) if readings[i] >= 9)
    assert after - 150 <= 30, f"the step showed {after - 150} s later"
    assert len(set(readings[200:])) <= 2


def test_requests_piling_up_count_before_they_end() -> None:
    """A step's requests take longer than those before it (bigger batches): the requests
    in flight and queued show it before any of them has ended."""
    signal = DemandSignal(DemandSettings(window_s=10, target=0.8))
    for i in range(50):  # 5 a second of 4 s: 20 at once, 3.1 servers
        signal.arrived("m", i / 5)
        signal.ended("m", i / 5, 4.0)
    assert signal.read("m", SERVERS, 10.0).desired == 4
    busy = [View(frozenset({"m"}), in_flight=12) for _ in range(4)]  # 48 now, 8 queued
    reading = signal.read("m", busy, 10.5, queued=8)
    assert abs(reading.needed - 56 / 6.4) < 1e-9 and reading.desired == 9


def test_borrowed_demand_is_not_ours_and_sent_away_demand_is() -> None:
    signal = DemandSignal(DemandSettings(window_s=10))
    for i in range(50):
        signal.arrived("m", i / 5, borrowed=True)  # a sibling's
        signal.sent_away("m", i / 5)  # ours, served elsewhere
        signal.ended("m", i / 5, 2.0)
    reading = signal.read("m", SERVERS, 10.0)
    assert reading.home_rate == 5.0 and reading.borrowed_rate == 5.0
    assert reading.sent_away_rate == 5.0


def test_never_below_what_loads_and_zero_only_without_demand() -> None:
    signal = DemandSignal()
    assert signal.read("m", SERVERS, 100.0).desired == 0
    assert signal.read("m", SERVERS, 100.0, loading=2).desired == 2
    signal.arrived("m", 100.0)  # demand, but nothing has ended yet: no service time
    assert signal.read("m", [], 100.5).desired == 1  # scale from zero: one server


def test_kv_usage_raises_the_need() -> None:
    full = [View(frozenset({"m"}), kv_usage=0.95) for _ in range(4)]
    signal = DemandSignal(DemandSettings(kv_target=0.85))
    assert signal.read("m", full, 1.0).desired == 5  # 4 x 0.95 / 0.85 = 4.47


async def test_the_balancer_publishes_the_signal_as_a_gauge_and_external_metric() -> None:
    config = BalancerConfig(demand=DemandSettings(window_s=5))
    async with stack((1.0, 1.0), cap=4, config=config) as (_fleet, balancer, client):
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 8, "x_output_tokens": 8}

        async def one() -> None:
            async with client.post("/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()

        await asyncio.gather(*(one() for _ in range(20)))
        async with admin_client(balancer) as admin:
            async with admin.get("/_admin/desired-replicas") as resp:
                listed = await resp.json()
            async with admin.get("/metrics") as resp:
                text = await resp.text()
    assert listed["kind"] == "ExternalMetricValueList"
    assert listed["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    (item,) = listed["items"]
    assert item["metricName"] == "director_desired_replicas"
    assert item["metricLabels"] == {"region": "test-region", "model": MODEL}
    assert int(item["value"]) >= 1
    (details,) = listed["details"]
    assert details["home_rate"] == 20 / 5 and details["servers"] == 2
    assert f'director_desired_replicas{{model="{MODEL}"}} {float(item["value"])}' in text


async def test_a_drain_may_wait_until_the_servers_streams_have_ended() -> None:
    """A scale-down's preStop: the drain answers once the server holds nothing (200), or
    504 when its streams outlast the wait."""
    async with stack((1.0,), time_scale=20.0, cap=4) as (_fleet, _balancer, client):
        balancer = _balancer
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 3000, "x_output_tokens": 3000,
                "stream": True}
        async with client.post("/v1/completions", json=body) as resp:
            await resp.content.readany()
            async with admin_client(balancer) as admin:
                async with admin.post("/_admin/drain",
                                      json={"backend": "gpu0", "wait_s": 0.2}) as drained:
                    assert drained.status == 504
                    assert (await drained.json())["in_flight"] == 1
                waiting = asyncio.ensure_future(admin.post(
                    "/_admin/drain", json={"backend": "gpu0", "wait_s": 60}))
                await asyncio.sleep(0.1)
                assert not waiting.done()
                await resp.read()  # the stream ends whole
                answer = await asyncio.wait_for(waiting, 30)
                assert answer.status == 200
                assert (await answer.json()) == {"backend": "gpu0", "draining": True,
                                                  "drained_by": ["admin"], "in_flight": 0}
                async with admin.post("/_admin/drain",
                                      json={"backend": "gpu0", "wait_s": "soon"}) as bad:
                    assert bad.status == 400
