# SPDX-License-Identifier: Apache-2.0
"""Prefix affinity: the prompt's block hashes, the LRU index, the scorer's table, and a
real balancer sending a shared prefix back to the backend that served it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regions.balancer import BalancerConfig
from regions.balancer.http.request_info import (
    MAX_PREFIX_BLOCKS,
    PREFIX_BLOCK_CHARS,
    PREFIX_BLOCK_IDS,
    parse_request,
)
from regions.balancer.scheduling.affinity_index import AffinityIndex
from regions.balancer.scheduling.load_bound import load_cap, within_bound
from regions.balancer.scheduling.scorers.least_requests import LeastRequestsScorer
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.types import Endpoint
from tests.balancer.helpers import completion, req, snap, stack, stream_completion

B = PREFIX_BLOCK_CHARS


def prefix(endpoint: Endpoint, body: dict[str, Any]) -> tuple[int, ...]:
    return parse_request(endpoint, {"model": "m", **body}, {}, prefill_ratio=150.0).prefix


def chat(*contents: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": c} for c in contents]}


@pytest.mark.parametrize(
    ("endpoint", "body", "blocks"),
    [
        (Endpoint.COMPLETIONS, {"prompt": "x" * (B - 1)}, 0),
        (Endpoint.COMPLETIONS, {"prompt": "x" * B}, 1),
        (Endpoint.COMPLETIONS, {"prompt": "x" * (2 * B + 10)}, 2),
        (Endpoint.COMPLETIONS, {"prompt": ["x" * (2 * B)]}, 2),
        (Endpoint.COMPLETIONS, {"prompt": ["a" * B, "b" * B]}, 0),
        (Endpoint.COMPLETIONS, {"prompt": list(range(2 * PREFIX_BLOCK_IDS + 1))}, 2),
        (Endpoint.COMPLETIONS, {"prompt": "x" * (B * MAX_PREFIX_BLOCKS * 3)}, MAX_PREFIX_BLOCKS),
        (Endpoint.CHAT, chat("y" * B), 1),
        (Endpoint.CHAT, chat(*["z" * B] * 1500), MAX_PREFIX_BLOCKS),
        (
            Endpoint.CHAT,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "w" * B}, {"type": "image_url"}],
                    }
                ]
            },
            1,
        ),
        (Endpoint.EMBEDDINGS, {"input": "x" * (4 * B)}, 0),
    ],
    ids=[
        "short",
        "one-block",
        "partial-tail-ignored",
        "single-prompt-list",
        "batch-of-prompts",
        "token-ids",
        "bounded",
        "chat",
        "chat-bounded",
        "chat-parts",
        "embeddings",
    ],
)
def test_block_count(endpoint, body, blocks) -> None:
    assert len(prefix(endpoint, body)) == blocks


def test_hashes_chain_over_the_prefix_and_the_model() -> None:
    base = prefix(Endpoint.COMPLETIONS, {"prompt": "a" * B + "b" * B + "c" * B})
    same_start = prefix(Endpoint.COMPLETIONS, {"prompt": "a" * B + "b" * B + "d" * B})
    other_first = prefix(Endpoint.COMPLETIONS, {"prompt": "e" * B + "b" * B + "c" * B})
    assert base[:2] == same_start[:2] and base[2] != same_start[2]
    assert not set(base) & set(other_first)  # block 1 names its whole prefix, not itself
    other_model = parse_request(
        Endpoint.COMPLETIONS, {"model": "n", "prompt": "a" * B}, {}, prefill_ratio=150.0
    ).prefix
    assert other_model[0] != base[0]
    turn1 = prefix(Endpoint.CHAT, chat("s" * B, "q1"))
    turn2 = prefix(Endpoint.CHAT, chat("s" * B, "q1", "answer", "q2"))
    assert turn2[: len(turn1)] == turn1  # a conversation's next turn extends its prefix


def test_index_per_backend_lru_bounded_by_capacity_and_forget() -> None:
    index = AffinityIndex(blocks_per_backend=4)
    index.record((1, 2, 3), "a")
    index.record((1, 2), "b")
    assert index.match((1, 2, 3, 9)) == {"a": 3, "b": 2}
    assert index.match((9, 1)) == {}  # nobody holds the first block: no match
    index.record((5, 6), "a")  # 5 blocks > a's 4: its oldest, the tail of (1, 2, 3), goes
    assert index.blocks_of("a") == 4 and index.match((1, 2, 3)) == {"a": 2, "b": 2}
    index.set_capacity("a", 2)  # a's KV capacity learned: it keeps its two most recent
    assert index.match((5, 6)) == {"a": 2} and index.match((1, 2)) == {"b": 2}
    index.forget("b")
    assert index.match((1, 2)) == {} and len(index) == 2


def test_index_match_is_the_run_each_backend_holds_whole() -> None:
    index = AffinityIndex()
    index.record((1, 2, 3, 4), "a")
    index.record((1, 2, 7), "b")
    index.record((1, 8), "c")
    assert index.match((1, 2, 3, 4)) == {"a": 4, "b": 2, "c": 1}
    assert index.match((1, 2, 7)) == {"a": 2, "b": 3, "c": 1}


def scored(
    index: AffinityIndex, blocks: tuple[int, ...], *loads: tuple[int, int], epsilon: float = 0.25
) -> list[float]:
    candidates = [snap(f"b{i}", i, in_flight=f, cap=c) for i, (f, c) in enumerate(loads)]
    return PrefixAffinityScorer(epsilon, index).score(req(prefix=blocks), candidates)


def index_of(**held: tuple[int, ...]) -> AffinityIndex:
    index = AffinityIndex()
    for name, blocks in held.items():
        index.record(blocks, name)
    return index


SCORER_CASES = [
    ("no-prefix", index_of(b0=(1, 2)), (), [(0, 4), (0, 4)], 0.25, [0.0, 0.0]),
    ("nothing-held", index_of(b0=(7,)), (1, 2), [(0, 4), (0, 4)], 0.25, [0.0, 0.0]),
    ("full-match", index_of(b0=(1, 2, 3, 4)), (1, 2, 3, 4), [(0, 4), (0, 4)], 0.25, [1.0, 0.0]),
    (
        "fraction",
        index_of(b0=(1,), b1=(1, 2, 3)),
        (1, 2, 3, 4),
        [(0, 4), (0, 4)],
        0.25,
        [0.25, 0.75],
    ),
    ("busy-but-within-bound", index_of(b0=(1, 2)), (1, 2), [(1, 4), (0, 4)], 0.25, [1.0, 0.0]),
    ("above-the-bound", index_of(b0=(1, 2)), (1, 2), [(3, 8), (0, 8)], 0.25, [0.0, 0.0]),
    ("larger-epsilon-buys-more", index_of(b0=(1, 2)), (1, 2), [(3, 8), (0, 8)], 1.0, [1.0, 0.0]),
    ("no-free-slot", index_of(b0=(1, 2)), (1, 2), [(4, 4), (4, 4)], 0.25, [0.0, 0.0]),
]


@pytest.mark.parametrize(
    ("index", "blocks", "loads", "epsilon", "expected"),
    [c[1:] for c in SCORER_CASES],
    ids=[c[0] for c in SCORER_CASES],
)
def test_scorer(index, blocks, loads, epsilon, expected) -> None:
    assert scored(index, blocks, *loads, epsilon=epsilon) == expected


def test_epsilon_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        PrefixAffinityScorer(-0.1)


LONG = "You are a helpful assistant. " * 40  # 1,160 characters: 4 blocks


@pytest.mark.parametrize(
    ("weight", "sticks"), [(3.0, True), (0.0, False)], ids=["affinity", "without-affinity"]
)
async def test_a_shared_prefix_returns_to_the_backend_that_served_it(weight, sticks) -> None:
    config = BalancerConfig(scorers=(("prefix-affinity", weight), ("queue-depth", 1.0)))
    async with stack(speeds=(1.0, 1.0, 1.0), config=config) as (_, balancer, client):
        served = []
        for turn in range(8):
            body = completion(2, prompt=f"{LONG} question {turn}")
            status, backend, _ = await stream_completion(client, body)
            assert status == 200
            served.append(backend)
        assert (len(set(served)) == 1) is sticks, served
        if sticks:
            explained = balancer.explain("/v1/completions", completion(2, prompt=LONG))
            step = next(s for s in explained["steps"] if s.get("plugin") == "prefix-affinity")
            assert step["scores"][served[0]] == 1.0
            assert sorted(step["scores"].values()) == [0.0, 0.0, 1.0]


async def test_prompts_are_hashed_only_when_a_prefix_scorer_reads_them() -> None:
    without = BalancerConfig(scorers=(("least-requests", 1.0),))
    for config, hashed in ((without, False), (BalancerConfig(), True)):
        async with stack(speeds=(1.0,), config=config) as (_, balancer, client):
            assert balancer.parse.settings.prefix_hashes is hashed
            status, _, _ = await stream_completion(client, completion(2, prompt=LONG))
            assert status == 200


@settings(max_examples=300)
@given(
    loads=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 256)), min_size=1,
                   max_size=8),
    held=st.lists(st.integers(0, 12), min_size=8, max_size=8),
    epsilon=st.sampled_from([0.0, 0.25, 1.0, 3.0]),
    weight=st.sampled_from([0.5, 2.0, 10.0, 1000.0]),
    free_slot=st.sampled_from([0.0, 1.0]),
)
def test_affinity_never_sends_a_request_beyond_the_load_bound(loads, held, epsilon, weight,
                                                              free_slot) -> None:
    """Whatever the index holds and however heavily affinity is weighted, the backend that
    scores best beside least-requests is within the bound: at most ``1 + epsilon`` times
    the mean load after taking the request."""
    blocks = tuple(range(1, 13))
    index = AffinityIndex()
    for i, n in enumerate(held[:len(loads)]):
        index.record(blocks[:n], f"b{i}")
    candidates = [snap(f"b{i}", i, in_flight=f, cap=c) for i, (f, c) in enumerate(loads)]
    request = req(prefix=blocks)
    affinity = PrefixAffinityScorer(epsilon, index, free_slot=free_slot)
    total = [lr + weight * a for lr, a in zip(
        LeastRequestsScorer().score(request, candidates),
        affinity.score(request, candidates), strict=True)]
    best = candidates[max(range(len(total)), key=total.__getitem__)]
    assert within_bound(best, load_cap(candidates, 1.0 + epsilon))
