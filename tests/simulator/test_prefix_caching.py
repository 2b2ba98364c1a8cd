# SPDX-License-Identifier: Apache-2.0
"""Automatic prefix caching in the simulator: block hashing, hits, sharing, eviction, and
the KV events that describe the cache."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regions.simulator.batching import RemovedBlocks, Scheduler, StepKind, StoredBlocks
from regions.simulator.config import EngineConfig
from regions.simulator.prefix_cache import PrefixCache
from regions.simulator.prompt_blocks import chat_stream, prompt_blocks

# round figures, and no context cost: these examples are about batching
ROUND = {"prefill_tokens_per_s": 1000.0, "decode_base_ms": 10.0,
         "decode_context_ms_per_ktoken": 0.0, "decode_alpha": 0.5,
         "kv_watermark": 0.0}
BLOCK_CHARS = 16 * 4


def make(record: bool = False, **overrides: object) -> Scheduler:
    return Scheduler(EngineConfig(**{**ROUND, **overrides}), record_events=record)


def text(seed: int, blocks: float) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh ") for _ in range(int(blocks * BLOCK_CHARS)))


def submit(s: Scheduler, prompt: str, output: int = 4, now: float = 0.0):
    blocks = prompt_blocks(prompt, s.config.block_size)
    return s.submit(-(-len(prompt) // 4), output, now, blocks)


def run_to_end(s: Scheduler, now: float = 0.0) -> float:
    while (step := s.plan()) is not None:
        now += step.duration
        s.complete(step, now)
    return now


def test_equal_prefixes_hash_equal_and_a_hash_names_the_whole_prefix() -> None:
    a = prompt_blocks(text(1, 3) + text(2, 2), 16)
    b = prompt_blocks(text(1, 3) + text(3, 2), 16)
    assert len(a.hashes) == len(b.hashes) == 5
    assert a.hashes[:3] == b.hashes[:3] and a.hashes[3] != b.hashes[3]
    # the same block text after a different prefix hashes differently
    c = prompt_blocks(text(9, 1) + text(1, 3), 16)
    assert set(c.hashes[1:]).isdisjoint(a.hashes)
    # only full blocks are hashed; each has block_size token ids
    assert len(prompt_blocks(text(1, 2.5), 16).hashes) == 2
    assert len(a.token_ids(0, 1)) == 16


def test_a_chat_that_grows_by_messages_keeps_its_earlier_blocks() -> None:
    turn1 = [{"role": "system", "content": text(1, 2)}, {"role": "user", "content": text(2, 1)}]
    turn2 = [*turn1, {"role": "assistant", "content": text(3, 1)},
             {"role": "user", "content": text(4, 1)}]
    first = prompt_blocks(chat_stream(turn1), 16).hashes
    second = prompt_blocks(chat_stream(turn2), 16).hashes
    assert second[:len(first)] == first and len(second) > len(first)


def test_a_repeated_prompt_prefills_only_its_last_block() -> None:
    s = make()
    prompt = text(1, 10)  # 160 tokens
    submit(s, prompt)
    first = s.plan()
    assert first is not None and first.duration == pytest.approx(0.160)
    s.complete(first, first.duration)
    run_to_end(s, first.duration)
    submit(s, prompt)
    again = s.plan()
    # 9 of its 10 blocks are cached; vLLM always computes the last token, so the last block
    assert again is not None and again.kind is StepKind.PREFILL
    assert again.duration == pytest.approx(0.016)
    c = s.counters
    assert (c.prefix_cache_queries, c.prefix_cache_hits) == (320, 144)


def test_a_shared_prefix_is_held_once_while_both_run() -> None:
    s = make()
    shared = text(1, 8)
    submit(s, shared + text(2, 2))
    s.complete(s.plan(), 1.0)
    used_one = s.kv_used
    submit(s, shared + text(3, 2))
    s.complete(s.plan(), 2.0)
    # the second holds the 8 shared blocks by reference: only its own tokens are new
    assert s.kv_used - used_one == 2 * 16 + 1  # its two own blocks and the token decoded


def test_without_prefix_caching_nothing_is_reused() -> None:
    s = make(prefix_caching=False)
    prompt = text(1, 10)
    submit(s, prompt)
    run_to_end(s)
    submit(s, prompt)
    step = s.plan()
    assert step is not None and step.duration == pytest.approx(0.160)
    assert s.counters.prefix_cache_queries == 0


def test_chunked_prefill_starts_after_the_cached_prefix() -> None:
    s = make(chunked_prefill=True, max_prefill_tokens=64, max_num_seqs=8)
    prompt = text(1, 12)  # 192 tokens
    submit(s, prompt)
    run_to_end(s)
    seq = submit(s, prompt)
    step = s.plan()
    assert step is not None and step.chunks == (16,)  # only the last block is computed
    s.complete(step, 10.0)
    assert seq.generated == 1


def test_unreferenced_blocks_are_evicted_tail_first_when_space_is_needed() -> None:
    # room for 20 blocks: a 10-block prompt is cached, then a 15-block one needs the space
    s = make(record=True, kv_cache_tokens=320, max_model_len=320)
    first = submit(s, text(1, 10), output=1)
    run_to_end(s)
    assert s.prefix is not None and len(s.prefix) == 10
    submit(s, text(2, 15), output=1)
    s.plan()
    removed = [h for e in s.kv_events if isinstance(e, RemovedBlocks) for h in e.hashes]
    # the 15 new blocks leave room for 5: the first prompt's head survives
    assert removed == list(reversed(first.hashes))[:5] and len(removed) == 5
    assert s.prefix.lookup(first.hashes, 10) == 5


def test_preempted_sequences_find_their_own_prompt_cached() -> None:
    s = make(kv_cache_tokens=400, max_model_len=400)
    a = submit(s, text(1, 10), output=200)
    b = submit(s, text(2, 10), output=200)
    run_to_end(s)
    assert a.preemptions + b.preemptions > 0
    assert a.generated == b.generated == 200


@settings(max_examples=60)
@given(ops=st.lists(st.tuples(st.sampled_from(["submit", "step", "abort", "reset"]),
                              st.integers(0, 5), st.integers(1, 12)), max_size=60),
       chunked=st.booleans())
def test_the_kv_events_describe_the_cache_exactly(ops: list[tuple[str, int, int]],
                                                  chunked: bool) -> None:
    """Replaying the events gives the cache's blocks; KV in use never exceeds the budget;
    every reference is released when the sequences end."""
    extra = {"chunked_prefill": True, "max_prefill_tokens": 96} if chunked else {}
    s = make(record=True, kv_cache_tokens=640, max_model_len=640, max_num_seqs=4, **extra)
    live = []
    now = 0.0
    for op, a, b in ops:
        if op == "submit":
            live.append(submit(s, text(a, 2) + text(a * 10 + b, b % 5), output=b, now=now))
        elif op == "step" and (step := s.plan()) is not None:
            now += step.duration
            s.complete(step, now)
        elif op == "abort" and live:
            s.abort(live.pop(a % len(live)))
        elif op == "reset":
            s.reset_prefix_cache()
        assert s.kv_used <= s.config.kv_cache_tokens
    run_to_end(s, now)
    known: set[int] = set()
    for event in s.kv_events:
        if isinstance(event, StoredBlocks):
            assert known.isdisjoint(event.hashes)
            assert len(event.token_ids) == 16 * len(event.hashes)
            assert event.parent is None or event.parent in known
            known.update(event.hashes)
        else:
            assert set(event.hashes) <= known
            known.difference_update(event.hashes)
    assert s.prefix is not None
    assert known == set(s.prefix._refs)
    assert s.prefix.referenced == 0 and s.kv_used == 0


def test_prefix_cache_lookup_stops_at_the_first_miss() -> None:
    cache = PrefixCache(16)
    assert cache.store([1, 2, 3]) == [(0, 3)]
    assert cache.store([1, 2, 4, 5]) == [(2, 4)]
    assert cache.lookup([1, 2, 9, 3], 4) == 2
    assert cache.lookup([1, 2, 3], 2) == 2
    cache.release([1, 2, 3])
    cache.release([1, 2, 4, 5])
    assert cache.free_cached == 5 and cache.referenced == 0
    # least recently freed first; within a sequence, its tail first
    assert cache.evict(2) == [3, 5, 4]
    assert cache.lookup([1, 2, 3], 3) == 2
