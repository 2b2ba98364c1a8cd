# SPDX-License-Identifier: Apache-2.0
"""The asyncio engine on a virtual clock: timings, speed, batching, streaming, aborts, faults."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from regions.simulator.clock import VirtualClock
from regions.simulator.config import EngineConfig
from regions.simulator.engine import Engine
from regions.simulator.errors import SequenceAborted

# round figures, and no context cost: these examples are about batching
ROUND = {"prefill_tokens_per_s": 1000.0, "decode_base_ms": 10.0,
         "decode_context_ms_per_ktoken": 0.0, "decode_alpha": 0.5}


async def started(**overrides: object) -> Engine:
    engine = Engine(EngineConfig(**{**ROUND, **overrides}), VirtualClock())
    await engine.start()
    return engine


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_one_request_takes_prefill_plus_decode_steps() -> None:
    engine = await started()
    seq = await engine.wait(engine.submit(200, 11))
    assert seq.first_token_at == pytest.approx(0.2)
    assert seq.finished_at == pytest.approx(0.2 + 10 * 0.010)
    await engine.stop()


@pytest.mark.parametrize("speed", [1.0, 0.6, 0.4, 0.25], ids=["h100", "a100", "throttled", "q"])
async def test_speed_divides_every_duration(speed: float) -> None:
    engine = await started(speed=speed)
    seqs = [engine.submit(300, 20) for _ in range(3)]
    for seq in seqs:
        await engine.wait(seq)
    # prefill of 900 tokens, then 19 decode steps of a batch of 3 (10 ms * 2.0)
    assert seqs[0].first_token_at == pytest.approx(0.9 / speed)
    assert seqs[0].finished_at == pytest.approx((0.9 + 19 * 0.020) / speed)
    await engine.stop()


async def test_decode_slows_as_the_batch_grows() -> None:
    alone = await started()
    solo = await alone.wait(alone.submit(10, 50))
    crowded = await started()
    batch = [crowded.submit(10, 50) for _ in range(8)]
    for seq in batch:
        await crowded.wait(seq)
    assert solo.finished_at is not None and batch[0].finished_at is not None
    solo_decode = solo.finished_at - solo.first_token_at
    batch_decode = batch[0].finished_at - batch[0].first_token_at
    assert solo_decode == pytest.approx(49 * 0.010)
    assert batch_decode == pytest.approx(49 * 0.010 * (1 + 0.5 * 7))
    await alone.stop()
    await crowded.stop()


async def test_a_request_queues_while_the_only_slot_is_busy() -> None:
    engine = await started(max_num_seqs=1)
    first = engine.submit(100, 10)
    second = engine.submit(100, 10)
    await engine.wait(second)
    assert first.finished_at == pytest.approx(0.1 + 9 * 0.010)
    assert second.first_token_at == pytest.approx(first.finished_at + 0.1)
    await engine.stop()


async def test_stream_yields_every_token_index_in_order() -> None:
    engine = await started()
    seq = engine.submit(10, 25)
    assert [i async for i in engine.stream(seq)] == list(range(25))
    await engine.stop()


async def test_abort_mid_stream_frees_the_slot_for_the_next_request() -> None:
    engine = await started(max_num_seqs=1)
    victim = engine.submit(10, 1000)
    queued = engine.submit(10, 5)
    async for index in engine.stream(victim):
        if index == 3:
            break
    engine.abort(victim)
    state = engine.state()
    assert (state.running, state.waiting, state.kv_used_tokens) == (0, 1, 0)
    done = await engine.wait(queued)
    assert done.generated == 5 and victim.generated < 1000
    await engine.stop()


async def test_waiters_of_an_aborted_sequence_are_told() -> None:
    engine = await started(max_num_seqs=1)
    engine.submit(10, 1000)
    waiting = engine.submit(10, 10)
    task = asyncio.create_task(engine.wait(waiting))
    await settle()
    engine.abort_all()
    with pytest.raises(SequenceAborted):
        await task
    await engine.stop()


async def test_slow_factor_multiplies_step_time() -> None:
    engine = await started()
    engine.slow_factor = 3.0
    seq = await engine.wait(engine.submit(100, 11))
    assert seq.finished_at == pytest.approx(3 * (0.1 + 10 * 0.010))
    await engine.stop()


async def test_hung_engine_accepts_but_produces_nothing_until_released() -> None:
    engine = await started()
    engine.hung = True
    seq = engine.submit(100, 5)
    await settle()
    assert seq.generated == 0 and engine.state().waiting == 1
    engine.hung = False
    await engine.wait(seq)
    assert seq.generated == 5
    await engine.stop()


async def test_stop_aborts_live_sequences() -> None:
    engine = await started()
    seq = engine.submit(100, 1000)
    await settle()
    await engine.stop()
    with pytest.raises(SequenceAborted):
        await engine.wait(seq)


class LateClock(VirtualClock):
    """Every sleep overshoots by ``late`` seconds, like a busy event loop."""

    def __init__(self, late: float) -> None:
        super().__init__()
        self.late = late

    async def sleep_until(self, deadline: float) -> None:
        await super().sleep_until(max(self.now(), deadline) + self.late)


@pytest.mark.parametrize(
    ("late", "lost"), [(0.005, False), (1.0, True)], ids=["jitter-absorbed", "starved"]
)
async def test_engine_catches_up_on_lateness_within_max_catchup(late: float, lost: bool) -> None:
    engine = Engine(EngineConfig(**ROUND), LateClock(late))
    await engine.start()
    seq = await engine.wait(engine.submit(100, 21))
    nominal = 0.1 + 20 * 0.010
    assert seq.finished_at is not None
    if lost:
        assert engine.state().lost_s > 0 and seq.finished_at > nominal + 1.0
    else:
        assert engine.state().lost_s == 0 and seq.finished_at == pytest.approx(nominal)
    await engine.stop()


@pytest.mark.parametrize(
    ("chunked", "longest_gap_s"),
    [(False, 2.0), (True, 0.499)],  # the whole prefill; one 499-token chunk beside a decode
    ids=["prefill-apart", "chunked-prefill"],
)
async def test_a_long_prompt_stalls_a_running_stream_unless_prefill_is_chunked(
    chunked: bool, longest_gap_s: float
) -> None:
    engine = await started(chunked_prefill=chunked, max_prefill_tokens=500)
    clock = engine.clock
    running = engine.submit(10, 60)
    stamps: list[float] = []

    async def read() -> None:
        async for _ in engine.stream(running):
            stamps.append(clock.now())
            if len(stamps) == 5:
                engine.submit(2000, 5)  # 2 s of prefill at 1,000 tokens/s

    await read()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) == 60
    assert max(gaps) == pytest.approx(longest_gap_s)
    await engine.stop()


async def test_first_token_and_wait_wake_once_at_their_moments() -> None:
    engine = await started()
    seq = engine.submit(200, 11)
    first = asyncio.ensure_future(engine.first_token(seq))
    end = asyncio.ensure_future(engine.wait(seq))
    await first
    assert seq.first_token_at == pytest.approx(0.2) and 1 <= seq.generated < 11
    assert not end.done()
    await end
    assert seq.finished_at == pytest.approx(0.3) and seq.generated == 11
    assert await engine.first_token(seq) is seq  # already past it: returns at once
    await engine.stop()


async def test_first_token_and_wait_raise_for_an_aborted_sequence() -> None:
    engine = await started(max_num_seqs=1)
    running, queued = engine.submit(100, 50), engine.submit(100, 5)
    first = asyncio.ensure_future(engine.first_token(queued))
    end = asyncio.ensure_future(engine.wait(queued))
    await engine.first_token(running)
    engine.abort(queued)
    with pytest.raises(SequenceAborted):
        await first
    with pytest.raises(SequenceAborted):
        await end
    await engine.stop()
