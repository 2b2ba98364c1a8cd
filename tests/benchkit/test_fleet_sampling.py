# SPDX-License-Identifier: Apache-2.0
"""The live bench's fleet figures: the collapse check (per model second, the most loaded
server over the mean) and the prefix-cache hit rate from /metrics deltas."""

from __future__ import annotations

import math

import pytest

from benchkit.fleet_sampling import collapse, hit_rate, prefix_counters

METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="sim-model"} 12000.0
vllm:prefix_cache_queries_created{model_name="sim-model"} 1.7e+09
vllm:prefix_cache_hits_total{model_name="sim-model"} 3000.0
vllm:prefix_cache_hits_totally_other 5.0
"""


def test_prefix_counters_sum_the_counters_and_nothing_else() -> None:
    assert prefix_counters(METRICS) == (12000.0, 3000.0)
    assert prefix_counters("vllm:num_requests_running 3.0\n") == (0.0, 0.0)


def test_hit_rate_is_fleet_hits_over_fleet_queries_over_the_window() -> None:
    before = {"gpu0": (1000.0, 0.0), "gpu1": (0.0, 0.0)}
    after = {"gpu0": (5000.0, 3000.0), "gpu1": (4000.0, 1000.0)}
    assert hit_rate(before, after) == pytest.approx(0.5)
    assert hit_rate(before, before) == 0.0  # no queries (or no counters): 0


def test_collapse_takes_one_sample_per_model_second() -> None:
    loads = [
        (0.0, (2, 2, 2, 2)),  # 1.0x
        (0.5, (8, 0, 0, 0)),  # same second: ignored
        (1.1, (6, 2, 2, 2)),  # 2.0x
        (2.0, (0, 0, 0, 0)),  # idle: no ratio
        (3.2, (3, 3, 2, 2)),  # 1.2x
    ]
    worst, share = collapse(loads)
    assert worst == pytest.approx(2.0)
    assert share == pytest.approx(1 / 3)


def test_collapse_of_an_idle_fleet_is_undefined() -> None:
    worst, share = collapse([(0.0, (0, 0)), (1.0, (0, 0))])
    assert math.isnan(worst) and share == 0.0
