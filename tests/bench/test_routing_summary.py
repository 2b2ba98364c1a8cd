# SPDX-License-Identifier: Apache-2.0
"""The routing bench's summary: ratios are paired per repeat (the same trace slice) before
their median is taken."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from routing import RunStats, paired_ratios, print_paired


def stats(ttft_p99: float, e2e_p99: float) -> RunStats:
    return RunStats(0.1, ttft_p99, 5.0, e2e_p99, 9.0, 2000.0, 0, 0, 1000, 0.2, {}, 0.0)


def test_ratios_pair_each_repeat_with_the_peers_same_repeat() -> None:
    ours = [stats(1.0, 20.0), stats(3.0, 18.0), stats(2.0, 21.0)]
    peer = [stats(0.8, 25.0), stats(5.0, 30.0), stats(1.0, 28.0)]
    assert paired_ratios(ours, peer, "ttft_p99") == pytest.approx([1.25, 0.6, 2.0])
    assert paired_ratios(ours, peer, "e2e_p99") == pytest.approx([0.8, 0.6, 0.75])


def test_the_paired_line_prints_each_slice_and_the_median_of_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ours = [stats(1.0, 20.0), stats(3.0, 18.0), stats(2.0, 21.0)]
    peer = [stats(0.8, 25.0), stats(5.0, 30.0), stats(1.0, 28.0)]
    print_paired("ours", {"ours": ours, "haproxy": peer})
    out = capsys.readouterr().out
    # the ratio of the medians would be 2.0 / 1.0 = 2.00x for TTFT; paired, it is 1.25x
    assert "TTFT p99 1.25 0.60 2.00 (median 1.25x)" in out
    assert "E2E p99 0.80 0.60 0.75 (median 0.75x)" in out
    print_paired("ours", {"ours": ours[:1], "haproxy": peer[:1]})
    assert capsys.readouterr().out == ""  # one repeat: nothing to pair
