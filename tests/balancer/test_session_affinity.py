# SPDX-License-Identifier: Apache-2.0
"""Session affinity: rendezvous hashing with bounded loads, as a table, as properties over
many sessions, and through a real balancer."""

from __future__ import annotations

import math
import random

import pytest

from regions.balancer import BalancerConfig
from regions.balancer.scheduling.scorers.session_affinity import (
    SessionAffinityScorer,
    rendezvous_weight,
)
from regions.balancer.types import BackendSnapshot
from tests.balancer.helpers import completion, req, snap, stack, stream_completion

NAMES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e")
SESSIONS = [f"session-{i}" for i in range(1000)]


def fleet(
    names: tuple[str, ...] = NAMES, loads: dict[str, int] | None = None, cap: int = 64
) -> list[BackendSnapshot]:
    loads = loads or {}
    return [snap(n, i, in_flight=loads.get(n, 0), cap=cap) for i, n in enumerate(names)]


def chosen(session: str | None, candidates: list[BackendSnapshot], c: float = 1.25) -> str | None:
    scores = SessionAffinityScorer(c).score(req(session=session), candidates)
    winners = [b.name for b, s in zip(candidates, scores, strict=True) if s == 1.0]
    assert sorted(scores) == [0.0] * (len(scores) - len(winners)) + [1.0] * len(winners)
    return winners[0] if winners else None


def top(session: str, names: tuple[str, ...] = NAMES) -> str:
    return max(names, key=lambda n: rendezvous_weight(session, n))


def test_no_session_is_neutral() -> None:
    assert SessionAffinityScorer().score(req(session=None), fleet()) == [0.0] * len(NAMES)


def test_mapping_is_stable_and_independent_of_candidate_order() -> None:
    shuffled = list(NAMES)
    random.Random(1).shuffle(shuffled)
    for session in SESSIONS[:200]:
        first = chosen(session, fleet())
        assert first == top(session)
        assert chosen(session, fleet()) == first
        assert chosen(session, fleet(tuple(shuffled))) == first


def test_sessions_spread_over_backends() -> None:
    counts = {n: 0 for n in NAMES}
    for session in SESSIONS:
        counts[chosen(session, fleet()) or ""] += 1
    assert all(140 <= c <= 260 for c in counts.values()), counts  # 200 each expected


def test_removing_a_backend_moves_only_its_sessions() -> None:
    before = {s: chosen(s, fleet()) for s in SESSIONS}
    survivors = tuple(n for n in NAMES if n != "gpu-c")
    after = {s: chosen(s, fleet(survivors)) for s in SESSIONS}
    moved = {s for s in SESSIONS if before[s] != after[s]}
    assert moved == {s for s in SESSIONS if before[s] == "gpu-c"}
    assert 100 <= len(moved) <= 300
    added = {s: chosen(s, fleet((*NAMES, "gpu-f"))) for s in SESSIONS}
    assert all(added[s] in (before[s], "gpu-f") for s in SESSIONS)  # a join only takes


@pytest.mark.parametrize(
    ("loads", "c", "moves"),
    [
        ({}, 1.25, False),  # cap = ceil(1.25 * 1 / 5) = 1; 0 + 1 <= 1
        ({"TOP": 1, "OTHERS": 1}, 1.25, False),  # cap = ceil(1.25 * 6 / 5) = 2; 1 + 1 <= 2
        ({"TOP": 2, "OTHERS": 1}, 1.25, True),  # cap = ceil(1.25 * 7 / 5) = 2; 2 + 1 > 2
        ({"TOP": 4}, 1.25, True),  # cap = ceil(1.25 * 5 / 5) = 2
        ({"TOP": 4}, 5.0, False),  # cap = ceil(5 * 5 / 5) = 5
        ({"TOP": 3, "OTHERS": 3}, 1.25, False),  # cap = ceil(1.25 * 16 / 5) = 4
    ],
    ids=[
        "idle",
        "top-busy-within-bound",
        "top-just-above-bound",
        "top-far-above-bound",
        "larger-c-tolerates-it",
        "all-equally-busy",
    ],
)
def test_bound(loads: dict[str, int], c: float, moves: bool) -> None:
    session = "session-42"
    best = top(session)
    in_flight = {n: loads.get("OTHERS", 0) for n in NAMES}
    in_flight[best] = loads.get("TOP", 0)
    choice = chosen(session, fleet(loads=in_flight), c)
    assert (choice != best) is moves
    if moves:  # spills to its next choice, not anywhere
        rest = tuple(n for n in NAMES if n != best)
        assert choice == top(session, rest)


@pytest.mark.parametrize("c", [1.0, 1.25, 2.0])
def test_loads_stay_within_c_times_the_mean(c: float) -> None:
    """Place 500 requests of 20 sessions (a few hot) one by one: no backend ever exceeds
    ceil(c * (total + 1) / n) although the sessions' top choices are very uneven."""
    rng = random.Random(7)
    sessions = [f"user-{i}" for i in range(20)]
    hot = sessions[:3]
    in_flight = dict.fromkeys(NAMES, 0)
    for _ in range(500):
        session = rng.choice(hot) if rng.random() < 0.7 else rng.choice(sessions)
        name = chosen(session, fleet(loads=in_flight), c)
        assert name is not None
        bound = math.ceil(c * (sum(in_flight.values()) + 1) / len(NAMES))
        in_flight[name] += 1
        assert in_flight[name] <= bound
        if rng.random() < 0.3:  # some requests finish
            done = rng.choice([n for n, f in in_flight.items() if f] or [name])
            in_flight[done] -= 1


def test_c_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="session-affinity: c: at least 1"):
        SessionAffinityScorer(0.9)


@pytest.mark.parametrize(
    ("weight", "sticks"), [(3.0, True), (0.0, False)], ids=["affinity", "without-affinity"]
)
async def test_a_session_stays_on_one_backend(weight: float, sticks: bool) -> None:
    config = BalancerConfig(scorers=(("session-affinity", weight), ("queue-depth", 1.0)))
    async with stack(speeds=(1.0, 1.0, 1.0), config=config) as (_, _, client):
        by_header, by_user = [], []
        for _ in range(6):
            headers = {"x-director-session": "conversation-7"}
            status, backend, _ = await stream_completion(client, completion(2), headers)
            assert status == 200
            by_header.append(backend)
            status, backend, _ = await stream_completion(client, completion(2, user="alice"))
            by_user.append(backend)
        assert (len(set(by_header)) == 1 and len(set(by_user)) == 1) is sticks
