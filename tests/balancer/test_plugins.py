# SPDX-License-Identifier: Apache-2.0
"""Table tests, one table per plugin."""

from __future__ import annotations

import random

import pytest

from regions.balancer.scheduling.filters.capacity import CapacityFilter
from regions.balancer.scheduling.filters.health import HealthFilter
from regions.balancer.scheduling.filters.model import ModelFilter
from regions.balancer.scheduling.filters.not_tried import NotTriedFilter
from regions.balancer.scheduling.pickers.max_score import MaxScorePicker
from regions.balancer.scheduling.pickers.power_of_two import PowerOfTwoPicker
from regions.balancer.scheduling.pickers.round_robin import RoundRobinPicker
from regions.balancer.scheduling.scorers.completion_time import CompletionTimeScorer
from regions.balancer.scheduling.scorers.outstanding_work import OutstandingWorkScorer
from regions.balancer.scheduling.scorers.queue_depth import QueueDepthScorer
from tests.balancer.helpers import req, snap

FILTER_CASES = [
    ("model-served", ModelFilter(), req(), snap(), None),
    (
        "model-lora-served",
        ModelFilter(),
        req(model="lora-a"),
        snap(models=frozenset({"base", "lora-a"})),
        None,
    ),
    ("model-missing", ModelFilter(), req(model="other"), snap(), "does not serve model 'other'"),
    ("health-ok", HealthFilter(), req(), snap(), None),
    ("health-unhealthy", HealthFilter(), req(), snap(healthy=False), "unhealthy"),
    (
        "health-ejected",
        HealthFilter(),
        req(),
        snap(ejected=True),
        "ejected after consecutive errors",
    ),
    ("health-draining", HealthFilter(), req(), snap(draining=True), "draining"),
    ("not-tried-fresh", NotTriedFilter(), req(exclude=frozenset({"x"})), snap(), None),
    (
        "not-tried-excluded",
        NotTriedFilter(),
        req(exclude=frozenset({"b0"})),
        snap(),
        "already failed this request",
    ),
    ("capacity-free", CapacityFilter(), req(), snap(in_flight=3, cap=4), None),
    ("capacity-full", CapacityFilter(), req(), snap(in_flight=4, cap=4), "full (4/4 in flight)"),
    ("capacity-prefetch", CapacityFilter(), req(), snap(in_flight=4, cap=4, prefetch=1), None),
    (
        "capacity-prefetch-full",
        CapacityFilter(),
        req(),
        snap(in_flight=5, cap=4, prefetch=1),
        "full (5/5 in flight)",
    ),
    (
        "capacity-slow-start-cap",
        CapacityFilter(),
        req(),
        snap(in_flight=1, cap=1),
        "full (1/1 in flight)",
    ),
]


@pytest.mark.parametrize(
    ("plugin", "request_", "backend", "expected"),
    [c[1:] for c in FILTER_CASES],
    ids=[c[0] for c in FILTER_CASES],
)
def test_filters(plugin, request_, backend, expected) -> None:
    assert plugin.check(request_, backend) == expected


SCORER_CASES = [
    # idle fast beats idle slow, in proportion to speed
    (
        "work-idle-speeds",
        OutstandingWorkScorer(),
        req(cost_tokens=10.0),
        [snap("a", tokens_per_s=100.0), snap("b", 1, tokens_per_s=40.0)],
        [1.0, 0.4],
    ),
    # (0 + 10)/100 = 0.1 s vs (90 + 10)/100 = 1 s
    (
        "work-backlog",
        OutstandingWorkScorer(),
        req(cost_tokens=10.0),
        [snap("a", tokens_per_s=100.0), snap("b", 1, tokens_per_s=100.0, work_tokens=90.0)],
        [1.0, 0.1],
    ),
    # a busy fast GPU can still beat an idle slow one: (30+10)/100=0.4 vs 10/20=0.5
    (
        "work-busy-fast-vs-idle-slow",
        OutstandingWorkScorer(),
        req(cost_tokens=10.0),
        [snap("a", tokens_per_s=100.0, work_tokens=30.0), snap("b", 1, tokens_per_s=20.0)],
        [1.0, 0.8],
    ),
    ("work-single", OutstandingWorkScorer(), req(), [snap()], [1.0]),
    ("queue-empty", QueueDepthScorer(), req(), [snap(in_flight=0, cap=4)], [1.0]),
    (
        "queue-mixed",
        QueueDepthScorer(),
        req(),
        [snap("a", in_flight=1, cap=4), snap("b", 1, in_flight=4, cap=4)],
        [0.75, 0.0],
    ),
    ("queue-over-cap-clamped", QueueDepthScorer(), req(), [snap(in_flight=6, cap=4)], [0.0]),
    # free slots: only the request's own decode time counts, 10/100 vs 10/40
    (
        "completion-free-slots",
        CompletionTimeScorer(),
        req(cost_tokens=10.0),
        [snap("a", tokens_per_s=100.0, in_flight=3, work_tokens=300.0),
         snap("b", 1, tokens_per_s=40.0)],
        [1.0, 0.4],
    ),
    # full fast GPU (4/4 + 1 waiting): wait 2 * (400/5/100)/4 = 0.4 s + 0.1 s = 0.5 s,
    # against 10/40 = 0.25 s on the idle slow one
    (
        "completion-full-fast-vs-free-slow",
        CompletionTimeScorer(),
        req(cost_tokens=10.0),
        [snap("a", tokens_per_s=100.0, in_flight=5, work_tokens=400.0, prefetch=1),
         snap("b", 1, tokens_per_s=40.0)],
        [0.5, 1.0],
    ),
    # a long request still prefers the fast GPU: 0.4 + 2 = 2.4 s against 200/40 = 5 s
    (
        "completion-long-waits-for-fast",
        CompletionTimeScorer(),
        req(cost_tokens=200.0),
        [snap("a", tokens_per_s=100.0, in_flight=5, work_tokens=400.0, prefetch=1),
         snap("b", 1, tokens_per_s=40.0)],
        [1.0, 0.48],
    ),
]


@pytest.mark.parametrize(
    ("plugin", "request_", "candidates", "expected"),
    [c[1:] for c in SCORER_CASES],
    ids=[c[0] for c in SCORER_CASES],
)
def test_scorers(plugin, request_, candidates, expected) -> None:
    assert plugin.score(request_, candidates) == pytest.approx(expected)


PICKER_CASES = [
    ("max-single", MaxScorePicker, [1.0], {0}),
    ("max-clear-winner", MaxScorePicker, [0.2, 0.9, 0.5], {1}),
    ("max-ties-spread", MaxScorePicker, [0.9, 0.1, 0.9], {0, 2}),
    ("p2c-single", PowerOfTwoPicker, [0.3], {0}),
    ("p2c-never-worst-of-two", PowerOfTwoPicker, [0.0, 1.0], {1}),
    ("p2c-three", PowerOfTwoPicker, [0.1, 0.5, 0.9], {1, 2}),
]


@pytest.mark.parametrize(
    ("factory", "scores", "allowed"),
    [c[1:] for c in PICKER_CASES],
    ids=[c[0] for c in PICKER_CASES],
)
def test_pickers(factory, scores, allowed) -> None:
    picker = factory(rng=random.Random(7))
    candidates = [snap(f"b{i}", i) for i in range(len(scores))]
    picks = {picker.pick(candidates, scores) for _ in range(200)}
    assert picks == allowed


def test_power_of_two_is_deterministic_with_seed() -> None:
    candidates = [snap(f"b{i}", i) for i in range(5)]
    scores = [0.5] * 5
    a = [PowerOfTwoPicker(rng=random.Random(3)).pick(candidates, scores) for _ in range(1)]
    b = [PowerOfTwoPicker(rng=random.Random(3)).pick(candidates, scores) for _ in range(1)]
    assert a == b


ROUND_ROBIN_CASES = [
    # (indices of the candidates at each pick, expected picked backend indices)
    ("rr-all", [[0, 1, 2]] * 5, [0, 1, 2, 0, 1]),
    ("rr-skips-dropped", [[0, 1, 2], [0, 2], [0, 2], [0, 1, 2]], [0, 2, 0, 1]),
    ("rr-single", [[1], [1], [0, 1]], [1, 1, 0]),
]


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [c[1:] for c in ROUND_ROBIN_CASES],
    ids=[c[0] for c in ROUND_ROBIN_CASES],
)
def test_round_robin_picker(rounds, expected) -> None:
    picker = RoundRobinPicker()
    picked = []
    for indices in rounds:
        candidates = [snap(f"b{i}", i) for i in indices]
        picked.append(candidates[picker.pick(candidates, [0.0] * len(candidates))].index)
    assert picked == expected
