# SPDX-License-Identifier: Apache-2.0
"""The balancer's speed estimate against simulated fleets whose speeds are known: after 60
model seconds at 70 % load the learned speed ratios are within 10 % of the truth on a fleet
mixing slot counts (256, 16, 64) and speeds (1, 0.6, 0.4), with whole-prompt and chunked
prefill; on a fleet of like GPUs every backend is called the fleet's speed."""

from __future__ import annotations

import random

import pytest

from benchkit import des
from benchkit.matrix import CONTEXT, parse_cells
from benchkit.routing_matrix import fleet_capacity
from benchkit.routing_trace import arrivals_at_load, load_named
from regions.balancer.scheduling.fleet_speed import Speed

WINDOW_S = 60.0


def learned(cells: str, seed: int = 101) -> tuple[list[float], dict[str, Speed]]:
    """(true speeds, learned speeds by server) after ``WINDOW_S`` of the cell's load."""
    (cell,) = parse_cells(cells)
    trace = load_named(cell.trace, CONTEXT[cell.trace])
    servers = cell.servers()
    offset = random.Random(seed).randrange(len(trace))
    piece = arrivals_at_load(trace, offset, cell.load, fleet_capacity(cell), until=WINDOW_S,
                             span=WINDOW_S, config=servers[0].engine)
    speeds: dict[str, Speed] = {}

    def look(ours: des.Ours) -> None:
        ours.pool.speeds.refit(float("inf"))
        speeds.update(ours.pool.speeds.speeds)

    loop = des.VirtualTimeLoop()
    try:
        loop.run_until_complete(des.replay("ours", servers, piece.arrivals, cell.max_tokens,
                                           WINDOW_S, cut_after=0.0, inspect=look))
    finally:
        loop.close()
    return [s.speed for s in servers], {s.name: speeds[s.name] for s in servers}


@pytest.mark.parametrize("engine", ["whole", "chunked"])
def test_a_mixed_fleet_is_learned_within_ten_percent_in_a_minute(engine: str) -> None:
    truth, speeds = learned(f"slots=mixed;speeds=mixed;engine={engine};trace=azure-conv;"
                            "lengths=hidden;load=0.7")
    estimates = [s.estimate for s in speeds.values()]
    for estimate, true in zip(estimates, truth, strict=True):
        assert estimate / estimates[0] == pytest.approx(true / truth[0], rel=0.10), speeds
    fast, slow = speeds["gpu0"], speeds["gpu4"]
    assert fast.used > 1.0 > slow.used  # told apart where it matters


def test_a_fleet_of_like_gpus_is_called_alike() -> None:
    _, speeds = learned("slots=mixed;speeds=uniform;engine=chunked;trace=azure-conv;"
                        "lengths=hidden;load=0.7")
    assert all(s.used == 1.0 for s in speeds.values()), speeds
