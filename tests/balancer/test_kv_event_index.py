# SPDX-License-Identifier: Apache-2.0
"""The precise prefix index: built from a simulated server's own KV events (through the
wire codec), it holds exactly what the server's prefix cache holds, keyed by tokens."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from engines.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    decode_batch,
    encode_batch,
)
from engines.sim_tokens import stream_bytes
from regions.balancer.scheduling.kv_event_index import KvEventIndex, token_keys
from regions.balancer.scheduling.scorers.prefix_affinity import PrefixAffinityScorer
from regions.balancer.types import Endpoint, RequestInfo
from regions.simulator.batching import Scheduler
from regions.simulator.config import EngineConfig
from regions.simulator.kv_publish import wire_events
from regions.simulator.prompt_blocks import prompt_blocks

from .helpers import snap

BLOCK_CHARS = 64


def text(seed: int, blocks: float) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh ") for _ in range(int(blocks * BLOCK_CHARS)))


def through_the_wire(index: KvEventIndex, backend: str, s: Scheduler) -> None:
    payload = encode_batch(EventBatch(0.0, tuple(wire_events(s.kv_events)), 0))
    s.kv_events.clear()
    index.apply(backend, decode_batch(payload).events)


@settings(max_examples=40)
@given(prompts=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40), st.integers(1, 9)),
                        min_size=1, max_size=40))
def test_the_index_holds_what_the_servers_cache_holds(prompts) -> None:
    s = Scheduler(EngineConfig(prefill_tokens_per_s=1000.0, kv_watermark=0.0,
                               kv_cache_tokens=1024, max_model_len=1024, max_num_seqs=3),
                  record_events=True)
    index = KvEventIndex()
    now = 0.0
    streams = []
    for head, tail, size in prompts:
        stream = text(head, 3) + text(tail, size)
        streams.append(stream)
        s.submit(len(stream) // 4, 2, now, prompt_blocks(stream, 16))
        for _ in range(3):
            if (step := s.plan()) is not None:
                now += step.duration
                s.complete(step, now)
        through_the_wire(index, "gpu0", s)
        assert s.prefix is not None
        for seen in streams:
            blocks = prompt_blocks(seen, 16)
            held = s.prefix.lookup(blocks.hashes, len(blocks.hashes))
            assert index.match(token_keys(stream_bytes(seen), 16, 1024)).get("gpu0", 0) == held


def test_blocks_whose_parent_was_never_seen_are_left_out() -> None:
    index = KvEventIndex()
    ids = tuple(range(32))
    index.apply("a", [BlockStored((7, 8), 99, ids, 16)])  # parent 99 unknown: a lost event
    assert len(index) == 0 and index.unkeyed_blocks == 2
    index.apply("a", [BlockStored((1,), None, ids[:16], 16),
                      BlockStored((2,), 1, ids[16:], 16)])
    assert index.blocks_of("a") == 2
    index.apply("a", [BlockRemoved((2,))])
    assert index.blocks_of("a") == 1
    index.apply("a", [AllBlocksCleared()])
    assert index.blocks_of("a") == 0 and len(index) == 0


def test_offloaded_copies_do_not_count() -> None:
    index = KvEventIndex()
    index.apply("a", [BlockStored((1,), None, tuple(range(16)), 16, medium="CPU")])
    assert len(index) == 0


def request(stream: str) -> RequestInfo:
    return RequestInfo(Endpoint.COMPLETIONS, "m", len(stream) // 4, None, 1.0, 1.0, False,
                       prefix=(), token_prefix=token_keys(stream_bytes(stream), 16, 1024))


def test_the_scorer_reads_exact_backends_from_events_and_the_rest_from_its_own_record() -> None:
    stream = text(1, 8)
    index = KvEventIndex()
    s = Scheduler(EngineConfig(), record_events=True)
    s.submit(len(stream) // 4, 1, 0.0, prompt_blocks(stream, 16))
    step = s.plan()
    assert step is not None
    s.complete(step, 1.0)
    through_the_wire(index, "b1", s)
    scorer = PrefixAffinityScorer(epsilon=1.0, precise=index)
    candidates = [snap("b0", 0, cap=4), snap("b1", 1, cap=4)]
    req = request(stream)
    # b1's stream has not been declared intact yet: nothing is trusted
    assert scorer.score(req, candidates) == [0.0, 0.0]
    index.resume("b1")
    assert scorer.score(req, candidates) == [0.0, 1.0]
    index.reset("b1")  # its stream broke: forgotten until it is back
    assert scorer.score(req, candidates) == [0.0, 0.0] and not index.exact("b1")
