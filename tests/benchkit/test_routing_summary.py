# SPDX-License-Identifier: Apache-2.0
"""The live routing bench's summary: ratios are paired per slice (the same trace slice for
every setup) before their median is taken; CPU per request and per token come from the
proxy's CPU over the requests it finished."""

from __future__ import annotations

import pytest

from benchkit.matrix import parse_cells
from benchkit.routing_client import Outcome
from benchkit.routing_live import RunStats, auto_scale, fleets, paired, print_cell, summarise


def stats(ttft_p99: float, e2e_p99: float, rate: float = 9.0) -> RunStats:
    return RunStats(0.1, ttft_p99, 5.0, e2e_p99, rate, 2000.0, 0, 0, 1000, 0.2, 1.5, 20.0,
                    {"gpu0": 0.5}, {"1": 1.0}, 0.0)


def test_ratios_pair_each_slice_with_the_peers_same_slice() -> None:
    ours = [stats(1.0, 20.0), stats(3.0, 18.0), stats(2.0, 21.0)]
    peer = [stats(0.8, 25.0), stats(5.0, 30.0), stats(1.0, 28.0)]
    assert paired(ours, peer, "ttft_p99") == pytest.approx([1.25, 0.6, 2.0])
    assert paired(ours, peer, "e2e_p99") == pytest.approx([0.8, 0.6, 0.75])


def test_the_cell_prints_each_slice_and_the_median_of_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Args:
        repeats, measure, warmup, scale = 3, 120.0, 20.0, 3.0

    ours = [stats(1.0, 20.0), stats(3.0, 18.0), stats(2.0, 21.0)]
    peer = [stats(0.8, 25.0), stats(5.0, 30.0), stats(1.0, 28.0)]
    (cell,) = parse_cells("slots=16;speeds=mixed;engine=whole;trace=azure-conv;"
                          "lengths=hidden;load=0.9")
    print_cell(cell, 10.0, {"ours": ours, "haproxy": peer}, Args())
    out = capsys.readouterr().out
    # the ratio of the medians would be 2.0 / 1.0 = 2.00x for TTFT; paired, it is 1.25x
    assert "TTFT p99 1.25x [1.25 0.60 2.00]" in out
    assert "E2E p99 0.75x [0.80 0.60 0.75]" in out


def test_cpu_per_request_and_token() -> None:
    outcomes = [Outcome(at=30.0 + i, status=200, ttft=0.1, e2e=2.0, output_tokens=100,
                        finished_at=32.0 + i) for i in range(10)]
    result = summarise(outcomes, (20.0, 140.0), cpu_s=0.5, wall_s=10.0,
                       utilization={}, served={}, lost=0.0)
    assert result.cpu == pytest.approx(0.05)
    assert result.cpu_ms_per_request == pytest.approx(50.0)
    assert result.cpu_us_per_token == pytest.approx(500.0)


def test_cells_run_grouped_by_fleet_and_scaled_to_the_machine() -> None:
    groups = fleets(parse_cells("slots=16;speeds=mixed;engine=whole;trace=azure-conv"))
    assert len(groups) == 1 and len(next(iter(groups.values()))) == 4
    assert auto_scale(36.0) == pytest.approx(1.0) and auto_scale(1.0) == 5.0


def test_large_bodies_slow_the_time_scale_to_the_byte_budget() -> None:
    assert auto_scale(30.0, 48_000) == pytest.approx(36.0 / 30.0)  # requests bind first
    assert auto_scale(30.0, 200_000) == pytest.approx(4e6 / (30.0 * 200_000))
