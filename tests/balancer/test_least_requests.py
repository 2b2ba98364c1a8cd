# SPDX-License-Identifier: Apache-2.0
"""``least-requests``: the fewest in flight wins, whatever each backend's capacity."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from regions.balancer.scheduling.scorers.least_requests import LeastRequestsScorer
from tests.balancer.helpers import req, snap


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(1, 1024)), min_size=1, max_size=12))
def test_ranks_as_leastconn_whatever_the_capacities(backends: list[tuple[int, int]]) -> None:
    candidates = [snap(f"b{i}", i, in_flight=n, cap=cap) for i, (n, cap) in enumerate(backends)]
    scores = LeastRequestsScorer().score(req(), candidates)
    assert all(0.0 < s <= 1.0 for s in scores)
    for a, sa in zip(candidates, scores, strict=True):
        for b, sb in zip(candidates, scores, strict=True):
            assert (sa > sb) == (a.in_flight < b.in_flight)


def test_no_candidates_no_scores() -> None:
    assert LeastRequestsScorer().score(req(), []) == []
