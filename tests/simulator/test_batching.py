# SPDX-License-Identifier: Apache-2.0
"""The pure continuous-batching scheduler: admission, queueing, step costs, preemption."""

from __future__ import annotations

import pytest

from regions.simulator.batching import Scheduler, SeqState, StepKind
from regions.simulator.config import EngineConfig
from regions.simulator.errors import ContextLengthError, SimConfigError

# Round numbers: prefill 1,000 tokens/s, decode step 10 ms * (1 + 0.5 * (batch - 1)), and
# no context cost: these examples are about batching.
ROUND = {"prefill_tokens_per_s": 1000.0, "decode_base_ms": 10.0,
         "decode_context_ms_per_ktoken": 0.0, "decode_alpha": 0.5}


def make(**overrides: object) -> Scheduler:
    return Scheduler(EngineConfig(**{**ROUND, "kv_watermark": 0.0, **overrides}))


def run_to_end(s: Scheduler, now: float = 0.0) -> float:
    while (step := s.plan()) is not None:
        now += step.duration
        s.complete(step, now)
    return now


@pytest.mark.parametrize(
    ("max_num_seqs", "submitted", "running", "waiting"),
    [(4, 2, 2, 0), (4, 4, 4, 0), (4, 6, 4, 2), (1, 3, 1, 2)],
    ids=["under", "exactly-full", "over", "one-slot"],
)
def test_slots_bound_running_and_the_rest_wait(
    max_num_seqs: int, submitted: int, running: int, waiting: int
) -> None:
    s = make(max_num_seqs=max_num_seqs)
    for _ in range(submitted):
        s.submit(100, 10, 0.0)
    step = s.plan()
    assert step is not None and step.kind is StepKind.PREFILL
    assert (len(s.running), len(s.waiting)) == (running, waiting)


def test_kv_budget_makes_requests_wait_even_with_free_slots() -> None:
    s = make(max_num_seqs=8, kv_cache_tokens=2000, max_model_len=2000)
    a = s.submit(1200, 10, 0.0)
    b = s.submit(1200, 10, 0.0)
    s.plan()
    assert a.state is SeqState.RUNNING and b.state is SeqState.WAITING
    assert s.kv_used == 1200
    run_to_end(s)
    assert b.state is SeqState.FINISHED


def test_fifo_head_of_line_is_not_overtaken() -> None:
    s = make(max_num_seqs=8, kv_cache_tokens=2000, max_model_len=2000)
    s.submit(1500, 10, 0.0)
    big = s.submit(1000, 10, 0.0)
    small = s.submit(10, 10, 0.0)  # would fit, but waits behind `big`
    s.plan()
    assert big.state is SeqState.WAITING and small.state is SeqState.WAITING


def test_prefill_cost_is_proportional_to_prompt_tokens() -> None:
    s = make()
    s.submit(300, 5, 0.0)
    s.submit(200, 5, 0.0)
    step = s.plan()
    assert step is not None and step.kind is StepKind.PREFILL
    assert step.duration == pytest.approx(0.5)  # 500 tokens at 1,000 tokens/s


def test_max_prefill_tokens_splits_a_prefill_but_admits_one_long_prompt() -> None:
    s = make(max_prefill_tokens=1000)
    s.submit(1500, 5, 0.0)
    s.submit(100, 5, 0.0)
    first = s.plan()
    assert first is not None and len(first.seqs) == 1
    s.complete(first, first.duration)
    second = s.plan()
    assert second is not None and second.kind is StepKind.PREFILL and len(second.seqs) == 1


@pytest.mark.parametrize(
    ("batch", "step_ms"),
    [(1, 10.0), (2, 15.0), (4, 25.0), (8, 45.0)],
    ids=["b1", "b2", "b4", "b8"],
)
def test_decode_step_grows_with_batch(batch: int, step_ms: float) -> None:
    s = make()
    for _ in range(batch):
        s.submit(10, 5, 0.0)
    prefill = s.plan()
    assert prefill is not None
    s.complete(prefill, prefill.duration)
    decode = s.plan()
    assert decode is not None and decode.kind is StepKind.DECODE
    assert len(decode.seqs) == batch
    assert decode.duration == pytest.approx(step_ms / 1000)


def test_prefill_yields_the_first_token_and_decode_one_token_per_step() -> None:
    s = make()
    seq = s.submit(100, 3, 0.0)
    end = run_to_end(s)
    assert seq.first_token_at == pytest.approx(0.1)
    assert end == pytest.approx(0.1 + 2 * 0.010)
    assert seq.generated == 3 and seq.state is SeqState.FINISHED
    assert s.counters.prompt_tokens == 100 and s.counters.generation_tokens == 3


def test_growth_beyond_the_budget_preempts_the_newest_and_recomputes_it() -> None:
    s = make(kv_cache_tokens=1000, max_model_len=1000)
    old = s.submit(480, 40, 0.0)
    new = s.submit(480, 40, 0.0)
    run_to_end(s)
    assert old.state is SeqState.FINISHED and new.state is SeqState.FINISHED
    assert new.preemptions >= 1 and old.preemptions == 0
    assert s.counters.preemptions == new.preemptions
    assert s.counters.generation_tokens == 80  # recompute re-emits nothing
    assert s.counters.prompt_tokens == 960  # counted once per request


def test_abort_frees_the_slot_and_kv_at_once() -> None:
    s = make(max_num_seqs=1)
    first = s.submit(500, 100, 0.0)
    second = s.submit(500, 100, 0.0)
    step = s.plan()
    assert step is not None
    assert s.abort(first) is True
    assert s.kv_used == 0 and not s.running
    s.complete(step, step.duration)  # the aborted sequence is skipped
    assert first.generated == 0
    s.plan()
    assert second.state is SeqState.RUNNING
    assert s.abort(first) is False  # idempotent


def test_abort_all_empties_running_and_waiting() -> None:
    s = make(max_num_seqs=1)
    seqs = [s.submit(10, 10, 0.0) for _ in range(3)]
    s.plan()
    assert len(s.abort_all()) == 3
    assert s.idle and all(q.state is SeqState.ABORTED for q in seqs)


def test_requests_longer_than_max_model_len_are_refused() -> None:
    s = make(max_model_len=1000, kv_cache_tokens=1000)
    with pytest.raises(ContextLengthError, match="maximum context length is 1000"):
        s.submit(900, 200, 0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("speed", 0.0, "engine.speed: must be > 0"),
        ("max_num_seqs", 0, "engine.max_num_seqs: must be > 0"),
        ("decode_alpha", -1.0, "engine.decode_alpha: must be >= 0"),
        ("kv_cache_tokens", 100, "engine.kv_cache_tokens: 100 is smaller than max_model_len"),
        ("max_prefill_tokens", 16, "engine.max_prefill_tokens: 16 leaves no room"),
    ],
    ids=["speed", "slots", "alpha", "kv-below-context", "chunk-budget"],
)
def test_config_errors_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(SimConfigError, match=message):
        EngineConfig(**{"chunked_prefill": field == "max_prefill_tokens", field: value})


# -- chunked prefill (vLLM v1) ----------------------------------------------------------------


def chunked(**overrides: object) -> Scheduler:
    return make(chunked_prefill=True, max_num_seqs=4, **overrides)


def test_chunked_a_long_prompt_prefills_in_chunks_while_the_others_decode() -> None:
    s = chunked(max_prefill_tokens=1000)
    old = s.submit(10, 50, 0.0)
    first = s.plan()
    assert first is not None and first.chunks == (10,)
    s.complete(first, first.duration)
    assert old.generated == 1
    long = s.submit(2500, 5, 0.0)
    now = first.duration
    steps = []
    while long.generated == 0:
        step = s.plan()
        assert step is not None
        now += step.duration
        s.complete(step, now)
        steps.append(step)
    # 999 + 999 + 502: the budget less the one decode each step
    assert [st.chunks for st in steps] == [(0, 999), (0, 999), (0, 502)]
    assert all(st.kind is StepKind.MIXED for st in steps)
    assert old.generated == 1 + 3  # it decoded in every one of them
    assert long.first_token_at == pytest.approx(now)


@pytest.mark.parametrize(
    ("decodes", "prompt", "step_s"),
    [(1, 999, 0.999), (4, 20, 0.025), (4, 0, 0.025), (0, 300, 0.3)],
    ids=["prefill-bound", "decode-bound", "decode-only", "prefill-only"],
)
def test_chunked_step_takes_the_longer_of_decode_and_prefill(
    decodes: int, prompt: int, step_s: float
) -> None:
    s = chunked(max_prefill_tokens=1000)
    for _ in range(decodes):
        s.submit(1, 50, 0.0)
    if decodes:
        warm = s.plan()
        assert warm is not None
        s.complete(warm, warm.duration)
    if prompt:
        s.submit(prompt, 5, 0.0)
    step = s.plan()
    assert step is not None
    assert step.duration == pytest.approx(step_s)  # decode 10 ms * (1 + 0.5 * 3) at 4


def test_chunked_admits_no_more_than_the_budget_can_start() -> None:
    s = chunked(max_prefill_tokens=600)
    for _ in range(4):
        s.submit(400, 5, 0.0)
    step = s.plan()
    assert step is not None and step.chunks == (400, 200)
    assert len(s.running) == 2 and len(s.waiting) == 2


def test_chunked_preemption_recomputes_and_every_token_is_emitted_once() -> None:
    s = chunked(kv_cache_tokens=1000, max_model_len=1000, max_prefill_tokens=300)
    old = s.submit(480, 40, 0.0)
    new = s.submit(480, 40, 0.0)
    run_to_end(s)
    assert old.state is SeqState.FINISHED and new.state is SeqState.FINISHED
    assert new.preemptions >= 1 and old.preemptions == 0
    assert s.counters.generation_tokens == 80
    assert s.counters.prompt_tokens == 960


def test_chunked_serves_a_queue_in_order_to_the_end() -> None:
    s = chunked(max_prefill_tokens=256)
    seqs = [s.submit(100 * (i + 1), 10 + i, 0.0) for i in range(8)]
    run_to_end(s)
    assert all(q.state is SeqState.FINISHED for q in seqs)
    assert [q.generated for q in seqs] == [10 + i for i in range(8)]
    firsts = [q.first_token_at for q in seqs]
    assert firsts == sorted(firsts)  # oldest first
    assert s.counters.prompt_tokens == sum(100 * (i + 1) for i in range(8))


def test_a_long_context_decodes_slower_than_a_short_one() -> None:
    """Attention reads each sequence's KV every step: 1 ms per 1,000 context tokens here.
    Two sequences of 1,000 prompt tokens after their first token hold 2,002 tokens: a step
    of 10 * (1 + 0.5) + 1 * 2.002 = 17.002 ms; two of 12,000 hold 24,002: 39.002 ms."""
    for prompt, step_ms in ((1000, 17.002), (12_000, 39.002)):
        s = make(decode_context_ms_per_ktoken=1.0, max_prefill_tokens=32_768,
                 max_model_len=16_384)
        for _ in range(2):
            s.submit(prompt, 5, 0.0)
        prefill = s.plan()
        assert prefill is not None and prefill.kind is StepKind.PREFILL
        s.complete(prefill, prefill.duration)
        decode = s.plan()
        assert decode is not None and decode.kind is StepKind.DECODE
        assert decode.duration == pytest.approx(step_ms / 1000)


def test_chunked_decodes_beside_a_prompt_chunk_pay_for_their_context() -> None:
    """Chunked prefill: a sequence of 3,000 tokens (after its first) decodes beside a
    100-token chunk of another's prompt. Decode 10 ms + 2 ms per 1,000 tokens * 3.001 =
    16.002 ms; the chunk 100 / 1000 tokens/s = 100 ms: the longer, 100 ms. With 50,000
    tokens of context (decode 110 ms) the decode is the longer."""
    for prompt, step_ms in ((3000, 100.0), (50_000, 10 + 2 * 50.001)):
        s = Scheduler(EngineConfig(**{**ROUND, "kv_watermark": 0.0,
                                      "decode_context_ms_per_ktoken": 2.0,
                                      "max_model_len": 65_536, "kv_cache_tokens": 200_000}
                                   ).chunked(prompt + 101))
        first = s.submit(prompt, 5, 0.0)
        step = s.plan()
        assert step is not None
        s.complete(step, step.duration)
        assert first.generated == 1
        s.submit(100, 5, 0.0)
        mixed = s.plan()
        assert mixed is not None and mixed.kind is StepKind.MIXED
        assert mixed.duration == pytest.approx(step_ms / 1000)
