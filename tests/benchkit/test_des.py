# SPDX-License-Identifier: Apache-2.0
"""The routing replay in virtual time (``benchkit/des.py``) and the matrix (``benchkit/matrix.py``,
``benchkit/routing_matrix.py``): the loop's clock jumps and keeps order, the engine keeps its
model times on it, both routers serve every counted request of any cell's fleet, and the
matrix selects, sizes and judges cells as documented."""

from __future__ import annotations

import asyncio

import pytest

from benchkit import des
from benchkit.matrix import DIMENSIONS, parse_cells
from benchkit.routing_matrix import floor_goals, floor_sides, intervals, verdict
from benchkit.routing_trace import Arrival
from regions.simulator.config import EngineConfig
from regions.simulator.engine import Engine


def test_virtual_time_jumps_and_keeps_order() -> None:
    loop = des.VirtualTimeLoop()
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
    12 ms plus 0.05 ms per 1,000 context tokens (``EngineConfig``), in virtual seconds: the
    ten steps after the first token hold 1,001 to 1,010 tokens."""
    loop = des.VirtualTimeLoop()

    async def main() -> tuple[float, float]:
        engine = Engine(EngineConfig(), des.LoopClock())
        await engine.start()
        start = loop.time()
        seq = engine.submit(1000, 11)
        await engine.first_token(seq)
        first = loop.time() - start
        await engine.wait(seq)
        await engine.stop()
        return first, seq.finished_at - seq.first_token_at

    try:
        first, decode = loop.run_until_complete(main())
    finally:
        loop.close()
    assert abs(first - 1000 / 16000) < 1e-6
    assert abs(decode - (10 * 0.012 + 0.05e-3 * (10_000 + 55) / 1000)) < 1e-9


@pytest.mark.parametrize("cell", ["slots=16;speeds=mixed;engine=whole",
                                  "slots=mixed;speeds=uniform;engine=chunked"],
                         ids=["16-mixed-whole", "mixed-uniform-chunked"])
@pytest.mark.parametrize("setup", ["ours", "leastconn"])
def test_both_routers_serve_every_counted_request(cell: str, setup: str) -> None:
    (servers,) = {tuple(c.servers()) for c in parse_cells(
        f"{cell};trace=azure-conv;lengths=declared;load=0.9")}
    arrivals = [Arrival(i * 0.05, 500 + 40 * (i % 50), 20 + 7 * (i % 30)) for i in range(200)]
    results = des.run(setup, list(servers), arrivals, None, 5.0)
    counted = sorted((r for r in results if r.at < 5.0), key=lambda r: r.at)
    assert len(counted) == 100
    assert all(r.status == 200 for r in counted)
    assert [r.output_tokens for r in counted] == [a.output_tokens for a in arrivals[:100]]
    assert all(0 < r.ttft <= r.e2e for r in counted)
    assert {r.backend for r in counted} <= {s.name for s in servers}


def test_ours_learns_the_capacities_it_is_not_told() -> None:
    """16-slot servers flooded: the scraped waiting counts give the slots, then requests
    wait in the region queue rather than at a server."""
    (cell,) = parse_cells("slots=16;speeds=uniform;engine=whole;trace=azure-conv;"
                          "lengths=declared;load=0.9")
    servers = cell.servers()
    arrivals = [Arrival(i * 0.01, 200, 400) for i in range(300)]
    loop = des.VirtualTimeLoop()

    async def main() -> list[int | None]:
        engines = {s.name: Engine(s.engine, des.LoopClock()) for s in servers}
        for engine in engines.values():
            await engine.start()
        router = des.Ours(servers, engines, des.BalancerConfig())
        await router.start()
        tasks = [asyncio.create_task(des._one(router, engines, a, None, [])) for a in arrivals]
        await asyncio.sleep(8.0)
        learned = [b.cap_now.slots for b in router.pool]
        peak = max(e.state().running + e.state().waiting for e in engines.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await router.stop()
        for engine in engines.values():
            await engine.stop()
        return [*learned, peak]

    try:
        *learned, peak = loop.run_until_complete(main())
    finally:
        loop.close()
    assert learned == [16] * 6
    assert peak >= 16


def test_cells_select_and_size() -> None:
    assert len(parse_cells("")) == 4 * 2 * 2 * 3 * 2 * 2
    cells = parse_cells("slots=mixed;speeds=mixed;engine=chunked;trace=mooncake-conv;"
                        "lengths=hidden;load=0.7")
    assert len(cells) == 1
    (cell,) = cells
    servers = cell.servers()
    assert [s.engine.max_num_seqs for s in servers] == [256, 16, 64, 256, 16, 64]
    assert [s.speed for s in servers] == [1.0, 1.0, 0.6, 0.6, 0.4, 0.4]
    assert all(s.engine.chunked_prefill and s.engine.max_model_len == 131_072 for s in servers)
    assert all(s.engine.kv_cache_tokens >= s.engine.max_model_len for s in servers)
    assert cell.max_tokens == 2048
    assert parse_cells("lengths=declared;trace=azure-conv")[0].max_tokens is None
    for bad in ("slots=17", "nope=1", "slots"):
        with pytest.raises(ValueError, match="--cells"):
            parse_cells(bad)
    assert set(DIMENSIONS) == {"slots", "speeds", "engine", "trace", "lengths", "load",
                               "prompts", "api"}


def _slice(ttft: float, e2e: float, rate: float, shed: int = 0) -> dict:
    return {"ttft_p99": ttft, "e2e_p99": e2e, "completed_per_s": rate, "shed": shed,
            "errors": 0}


def test_the_floor_is_judged_on_the_interval_of_per_slice_ratios() -> None:
    """The median of the per-slice ratios is the point; a floor is held only when the
    whole bootstrap interval is on its side: one slow slice in three leaves TTFT and
    throughput undecided, not passed."""
    cell = {"slices": [{"leastconn": _slice(1.0, 10.0, 5.0), "ours": _slice(1.2, 9.0, 5.0)},
                       {"leastconn": _slice(1.0, 10.0, 5.0), "ours": _slice(1.0, 9.0, 5.0)},
                       {"leastconn": _slice(1.0, 10.0, 5.0), "ours": _slice(0.9, 12.0, 4.9)}]}
    medians, failed = verdict(cell, "ours")
    assert medians == {"ttft": 1.0, "e2e": 0.9, "throughput": 1.0}
    assert failed == ["ttft?", "e2e?", "req/s?"]
    assert floor_sides(intervals(cell, "ours")) == {"ttft": "undecided", "e2e": "undecided",
                                         "throughput": "undecided"}
    steady = {"slices": [{"leastconn": _slice(1.0, 10.0, 5.0),
                          "ours": _slice(0.9 + i / 100, 9.0, 5.0)} for i in range(5)]}
    assert verdict(steady, "ours")[1] == []
    worse = {"slices": [{"leastconn": _slice(1.0, 10.0, 5.0),
                         "ours": _slice(1.2 + i / 100, 9.0, 5.0)} for i in range(5)]}
    assert floor_sides(intervals(worse, "ours"))["ttft"] == "missed"
    assert verdict(worse, "ours")[1] == ["ttft"]
    steady["slices"][0]["ours"]["shed"] = 1
    assert verdict(steady, "ours")[1] == ["errors"]


def _cell(label: str, ttfts: list[float], load: float = 0.9, counted: int = 1200) -> dict:
    slices = []
    for t in ttfts:
        ours = _slice(t, 10.0, 5.0) | {"counted": counted}
        slices.append({"leastconn": _slice(1.0, 10.0, 5.0) | {"counted": counted},
                       "ours": ours})
    return {"label": label, "cell": {"load": load, "speeds": "uniform"}, "slices": slices}


def test_the_issues_floor_is_judged_pooled_per_cell_and_on_enough_data() -> None:
    level = [_cell(f"level-{i}", [0.98, 1.0, 1.02, 0.99, 1.01]) for i in range(20)]
    lines = floor_goals(level, "ours")
    assert lines[0].startswith("held ttft") and lines[1].startswith("held e2e")
    assert all(line.startswith("held") for line in lines), lines
    # one cell worse in every slice: its median (1.3) and every slice (> 1.1) fail it,
    # though a sign test over 21 cells cannot convict it (Holm)
    worse = [*level, _cell("worse", [1.3, 1.25, 1.4, 1.3, 1.35])]
    ttft = floor_goals(worse, "ours")[0]
    assert ttft.startswith("NOT held ttft") and "0 cells above 1.05 (Holm)" in ttft
    assert "1 medians above 1.2; 1 cells with every slice above 1.1" in ttft
    assert ttft.endswith("\n      worse")
    # three slices, or 800 requests a slice, are not enough to judge
    few = [_cell("few", [1.0, 1.0, 1.0], counted=800)]
    assert floor_goals(few, "ours")[-1].startswith("NOT held enough to judge: >= 800")
    shed = [_cell("shed", [1.0] * 5)]
    shed[0]["slices"][2]["ours"]["shed"] = 3
    assert floor_goals(shed, "ours")[3] == "NOT held no 429 or error below capacity: 1 cells"
