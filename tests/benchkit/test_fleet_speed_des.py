# SPDX-License-Identifier: Apache-2.0
"""The balancer's speed estimate against simulated fleets whose speeds are known: after 60
model seconds at 70 % load the learned speed ratios are within 10 % of the truth on a fleet
mixing slot counts (256, 16, 64) and speeds (1, 0.6, 0.4), with whole-prompt and chunked
prefill; on a fleet of like GPUs every backend is called the fleet's speed."""

from __future__ import annotations

import pytest

from benchkit.matrix import parse_cells
from benchkit.speed_check import learned_speeds
from regions.balancer.scheduling.fleet_speed import Speed

WINDOW_S = 60.0


def learned(cells: str, seed: int = 101) -> tuple[list[float], dict[str, Speed]]:
    """(true speeds, learned speeds by server) after ``WINDOW_S`` of the cell's load."""
    (cell,) = parse_cells(cells)
    speeds = learned_speeds(cell, seed, WINDOW_S)
    return [s.speed for s in cell.servers()], {s.name: speeds[s.name] for s in cell.servers()}


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
