# SPDX-License-Identifier: Apache-2.0
"""The routing replay in virtual time: real balancer objects and simulator engines on a loop
whose clock jumps; it must reproduce what the engine model predicts, and end."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from routing import CAPACITY
from routing_des import LoopClock, VirtualTimeLoop, fleet_capacity, run
from routing_trace import Arrival

from regions.simulator.config import EngineConfig
from regions.simulator.engine import Engine


def test_virtual_time_jumps_and_keeps_order() -> None:
    loop = VirtualTimeLoop()
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        seen.append((name, loop.time()))

    async def main() -> None:
        await asyncio.gather(sleeper("late", 3600.0), sleeper("early", 60.0))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [name for name, _ in seen] == ["early", "late"]
    assert seen[0][1] >= 60.0 and abs(seen[1][1] - 3600.0) < 1e-3


def test_an_engine_on_the_loop_clock_keeps_the_model_times() -> None:
    """Alone, a 1,000-token prompt prefills in 1000 / 16000 s and each decode step takes
    12 ms (``EngineConfig``), in virtual seconds."""
    loop = VirtualTimeLoop()

    async def main() -> tuple[float, float]:
        engine = Engine(EngineConfig(), LoopClock())
        await engine.start()
        start = loop.time()
        seq = engine.submit(1000, 11)
        times = [loop.time() async for _ in engine.stream(seq)]
        await engine.stop()
        return times[0] - start, times[-1] - times[0]

    try:
        first, decode = loop.run_until_complete(main())
    finally:
        loop.close()
    assert abs(first - 1000 / 16000) < 1e-6
    assert abs(decode - 10 * 0.012) < 1e-6


@pytest.mark.parametrize(
    "engine",
    [EngineConfig(), EngineConfig(chunked_prefill=True, max_prefill_tokens=2048)],
    ids=["prefill-apart", "chunked-prefill"],
)
def test_both_routers_serve_every_counted_request(engine: EngineConfig) -> None:
    arrivals = [Arrival(i * 0.05, 500 + 40 * (i % 50), 20 + 7 * (i % 30)) for i in range(200)]
    for setup in ("ours", "haproxy"):
        results, _ = run(setup, arrivals, None, 5.0, engine=engine)
        counted = [r for r in results if r.at < 5.0]
        assert len(counted) == 100, setup
        assert all(
            r.output_tokens == a.output_tokens
            for r, a in zip(sorted(counted, key=lambda r: r.at), arrivals[:100], strict=True)
        ), setup
        assert all(0 < r.ttft <= r.e2e for r in counted), setup
        assert {r.backend for r in counted} <= {f"gpu{i}" for i in range(6)}, setup


def test_fleet_capacity_is_the_simulator_checks_measure() -> None:
    """The standard engine reproduces the bench's recorded capacity; chunked prefill, whose
    decodes do not stop for prefills, serves more."""
    standard = fleet_capacity(EngineConfig())
    assert abs(standard - CAPACITY) / CAPACITY < 0.02
    assert fleet_capacity(EngineConfig(chunked_prefill=True, max_prefill_tokens=2048)) > standard
