# SPDX-License-Identifier: Apache-2.0
"""The ``latency-ewma`` scorer (table), and the proxy feeding each backend's TTFT EWMA from
real simulated GPU servers."""

from __future__ import annotations

import pytest

from regions.balancer import BalancerConfig, OutlierConfig
from regions.balancer.scheduling.registry import Registry, register_builtin_plugins
from regions.balancer.scheduling.scorers.latency_ewma import LatencyEwmaScorer
from regions.simulator import Fault, FaultMode
from routing import Kind
from tests.balancer.helpers import completion, req, snap, stack, stream_completion
from tests.run_clock import RunClock


def timed(name: str, index: int, ewma: float | None, samples: int = 10):
    return snap(name, index, ttft_ewma_s=ewma, ttft_samples=0 if ewma is None else samples)


SCORER_CASES = [
    ("single", LatencyEwmaScorer(), [timed("a", 0, 0.3)], [1.0]),
    # best / own: 0.1/0.1, 0.1/0.4
    ("ratio", LatencyEwmaScorer(), [timed("a", 0, 0.1), timed("b", 1, 0.4)], [1.0, 0.25]),
    (
        "three",
        LatencyEwmaScorer(),
        [timed("a", 0, 0.2), timed("b", 1, 0.1), timed("c", 2, 1.0)],
        [0.5, 1.0, 0.1],
    ),
    # no samples: scored as the median of the measured ones (0.2 and 0.4 -> 0.3)
    (
        "unmeasured-is-median",
        LatencyEwmaScorer(),
        [timed("a", 0, 0.2), timed("b", 1, 0.4), timed("new", 2, None)],
        [1.0, 0.5, 2 / 3],
    ),
    # too few samples count as none
    (
        "few-samples-neutral",
        LatencyEwmaScorer(min_samples=3),
        [timed("a", 0, 0.1), timed("b", 1, 5.0, samples=2)],
        [1.0, 1.0],
    ),
    (
        "min-samples-one",
        LatencyEwmaScorer(min_samples=1),
        [timed("a", 0, 0.1), timed("b", 1, 0.5, samples=1)],
        [1.0, 0.2],
    ),
    (
        "nothing-measured",
        LatencyEwmaScorer(),
        [timed("a", 0, None), timed("b", 1, None)],
        [1.0, 1.0],
    ),
    ("zero-ewma-guarded", LatencyEwmaScorer(), [timed("a", 0, 0.0), timed("b", 1, 0.0)], [1, 1]),
]


@pytest.mark.parametrize(
    ("plugin", "candidates", "expected"),
    [c[1:] for c in SCORER_CASES],
    ids=[c[0] for c in SCORER_CASES],
)
def test_latency_ewma_scorer(plugin, candidates, expected) -> None:
    assert plugin.score(req(), candidates) == pytest.approx(expected)


def test_registered_under_its_name() -> None:
    registry = register_builtin_plugins(Registry())
    assert isinstance(registry.create(Kind.SCORER, "latency-ewma").plugin, LatencyEwmaScorer)


async def test_proxy_feeds_the_ttft_average_and_the_scorer_prefers_the_fast_server() -> None:
    config = BalancerConfig(
        scorers=(("latency-ewma", 1.0),),
        picker="round-robin",  # both get traffic whatever the scores
        outliers=OutlierConfig(ttft_factor=0.0),  # measured here, never ejected
    )
    # on a RunClock: a stretch without a CPU must not read as a slow first token
    async with RunClock() as clock, stack(time_scale=5.0, config=config, clock=clock) as (
            fleet, balancer, client):
        fleet["gpu1"].set_fault(Fault(FaultMode.SLOW, factor=8.0))
        body = completion(2, x_prompt_tokens=2000)
        for _ in range(8):
            assert (await stream_completion(client, body))[0] == 200
        status, _, _ = await stream_completion(client, completion(2, stream=False))
        assert status == 200  # non-streamed: the first byte of the body counts
        fast, slow = balancer.pool["gpu0"], balancer.pool["gpu1"]
        assert fast.ttft.samples + slow.ttft.samples == 9
        assert slow.ttft.value > 3 * fast.ttft.value
        views = {v.name: v for v in balancer.pool.snapshot().backends}
        assert views["gpu0"].ttft_ewma_s == pytest.approx(fast.ttft.value)
        assert views["gpu1"].ttft_samples == slow.ttft.samples
        decision = balancer.explain("/v1/completions", completion(2))
        scores = next(s for s in decision["steps"] if s["stage"] == "scorer")["scores"]
        assert scores["gpu0"] == 1.0 and scores["gpu1"] < 0.35

        balancer.drain("gpu1")
        fleet["gpu0"].set_fault(Fault(FaultMode.ERROR5XX, status=500))
        before = fast.ttft.samples
        assert (await stream_completion(client, completion(2)))[:2] == (500, "gpu0")
        assert fast.ttft.samples == before  # an error answer is no TTFT sample
