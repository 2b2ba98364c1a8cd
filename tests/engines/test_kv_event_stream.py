# SPDX-License-Identifier: Apache-2.0
"""``KvEventPublisher`` -> ``KvEventSubscriber`` over real ZeroMQ sockets on loopback (ports
picked by ZeroMQ): vLLM's frames and replay protocol, order, gaps healed by replay, resets
when they cannot be, publisher restarts and kills, garbage on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from engines.kv_event_publisher import END_SEQ, KvEventPublisher
from engines.kv_event_subscriber import KvEventSubscriber
from engines.kv_events import (
    BlockStored,
    EventBatch,
    KvEvent,
    decode_batch,
    encode_batch,
)
from state.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
ANY_PORT = "tcp://127.0.0.1:*"


def stored(n: int) -> BlockStored:
    return BlockStored(block_hashes=(n,), parent_block_hash=None, token_ids=(n,), block_size=1)


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


class Recorder:
    """What the subscriber's callbacks saw, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def on_events(self, events: list[KvEvent]) -> None:
        for event in events:
            assert isinstance(event, BlockStored)
            self.log.append(("event", event.block_hashes[0]))

    def on_reset(self, reason: str) -> None:
        self.log.append(("reset", reason))

    @property
    def ids(self) -> list[object]:
        return [value for kind, value in self.log if kind == "event"]

    @property
    def resets(self) -> list[object]:
        return [value for kind, value in self.log if kind == "reset"]


async def until(condition: Callable[[], bool], what: str, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.002)


@contextlib.asynccontextmanager
async def following(endpoint: str, replay: str | None = None,
                    **options: float) -> AsyncIterator[tuple[KvEventSubscriber, Recorder]]:
    recorder = Recorder()
    sub = KvEventSubscriber(endpoint, replay, on_events=recorder.on_events,
                            on_reset=recorder.on_reset, **options)
    await sub.start()
    try:
        await until(lambda: sub.healthy, "the subscriber to connect")
        yield sub, recorder
    finally:
        await sub.stop()


async def in_sync(pub: KvEventPublisher, sub: KvEventSubscriber, recorder: Recorder,
                  clear: bool = True) -> int:
    """Publish probes (block -1) until one is applied (the slow joiner may drop the first);
    clears the recorder unless told not to, and returns the seq the next publish gets."""
    while True:
        seq = pub.publish([stored(-1)])
        with contextlib.suppress(AssertionError):
            await until(lambda: sub.last_seq == seq, "a probe", timeout=0.05)  # noqa: B023
            if clear:
                recorder.log.clear()
            return seq + 1


def dropping(pub: KvEventPublisher, seqs: range) -> None:
    """Lose the PUB messages of ``seqs`` on the way (the replay buffer keeps them)."""
    send = pub._send

    def lossy(frames: tuple[bytes, bytes, bytes]) -> None:
        if int.from_bytes(frames[1], "big") not in seqs:
            send(frames)

    pub._send = lossy  # type: ignore[method-assign]


# -- the publisher on the wire, as vLLM's consumers see it -----------------------------------


async def test_publisher_frames_and_replay_are_vllms() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT, buffer_steps=3, topic="kv")
    ctx = zmq.asyncio.Context(zmq.Context.instance())
    sub, dealer = ctx.socket(zmq.SUB), ctx.socket(zmq.DEALER)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.connect(pub.endpoint)
        while not await sub.poll(20):  # the slow joiner: publish until one arrives
            pub.publish([stored(0)])
        pub.publish([stored(1)])
        received = [await sub.recv_multipart()]
        while decode_batch(received[-1][2]).events != (stored(1),):
            received.append(await asyncio.wait_for(sub.recv_multipart(), 2))
        assert all(len(f) == 3 and f[0] == b"kv" and len(f[1]) == 8 for f in received)
        seqs = [int.from_bytes(f[1], "big") for f in received]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        last, payload = seqs[-1], received[-1][2]
        batch = decode_batch(payload)
        assert batch.data_parallel_rank == 0
        assert payload == encode_batch(EventBatch(batch.ts, (stored(1),), 0))

        dealer.connect(pub.replay_endpoint)
        await dealer.send_multipart([b"", seq_bytes(0)])
        buffered = list(range(max(0, last - 2), last + 1))  # the last buffer_steps batches
        replies = [await asyncio.wait_for(dealer.recv_multipart(), 2) for _ in buffered]
        assert [int.from_bytes(r[1], "big") for r in replies] == buffered
        assert replies[-1] == [b"", seq_bytes(last), payload]
        assert await asyncio.wait_for(dealer.recv_multipart(), 2) == [b"", END_SEQ, b""]
    finally:
        sub.close(linger=0)
        dealer.close(linger=0)
        pub.close()


# -- in order, gaps ----------------------------------------------------------------------------


async def test_batches_arrive_in_order_each_once() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT)
    try:
        async with following(pub.endpoint, pub.replay_endpoint) as (sub, recorder):
            for n in range(200):  # the slow joiner drops the first few: replayed from seq 0
                pub.publish([stored(n)])
            await until(lambda: len(recorder.ids) >= 200, "200 events")
            assert recorder.log == [("event", n) for n in range(200)]
            counters = sub.counters
            assert (counters.batches, counters.events, counters.gaps, counters.resets) \
                == (200, 200, 0, 0)
            assert sub.last_seq == 199
    finally:
        pub.close()


async def test_subscriber_to_an_idle_publisher_is_replayed_its_history_on_connecting() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT)
    try:
        for n in range(10):
            pub.publish([stored(n)])
        async with following(pub.endpoint, pub.replay_endpoint) as (sub, recorder):
            await until(lambda: len(recorder.ids) == 10, "the history")
            assert recorder.log == [("event", n) for n in range(10)]
            assert sub.last_seq == 9 and sub.counters.replays == 1
            await in_sync(pub, sub, recorder)
            assert sub.counters.resets == 0 and sub.counters.gaps == 0
    finally:
        pub.close()


async def test_first_batch_after_the_slow_joiner_is_replayed_from_seq_0() -> None:
    async with raw_publisher() as xpub:
        router = zmq.asyncio.Context(zmq.Context.instance()).socket(zmq.ROUTER)
        router.bind(ANY_PORT)
        try:
            async with following(endpoint_of(xpub), endpoint_of(router)) as (sub, recorder):
                ident, _, start = await asyncio.wait_for(router.recv_multipart(), 2)
                assert start == seq_bytes(0)  # the catch-up on connecting: nothing yet
                await router.send_multipart([ident, b"", END_SEQ, b""])
                await asyncio.wait_for(xpub.recv(), 2)
                await xpub.send_multipart([b"", seq_bytes(2), payload(2)])  # 0, 1 lost
                ident, _, start = await asyncio.wait_for(router.recv_multipart(), 2)
                assert start == seq_bytes(0)
                for seq in (0, 1, 2, 3):  # 2 and 3 are not asked for: dropped
                    await router.send_multipart([ident, b"", seq_bytes(seq), payload(seq)])
                await router.send_multipart([ident, b"", END_SEQ, b""])
                await xpub.send_multipart([b"", seq_bytes(3), payload(3)])
                await until(lambda: 3 in recorder.ids, "the batch after")
                assert recorder.log == [("event", n) for n in range(4)]
                assert (sub.counters.gaps, sub.counters.replays, sub.counters.resets) \
                    == (0, 2, 0)
        finally:
            router.close(linger=0)


async def test_gap_is_healed_by_replay() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT)
    try:
        async with following(pub.endpoint, pub.replay_endpoint) as (sub, recorder):
            base = await in_sync(pub, sub, recorder)
            before = sub.counters
            dropping(pub, range(base + 2, base + 7))
            for n in range(10):
                pub.publish([stored(n)])
            await until(lambda: len(recorder.ids) == 10, "10 events")
            assert recorder.log == [("event", n) for n in range(10)]
            after = sub.counters
            assert (after.gaps - before.gaps, after.replays - before.replays, after.resets) \
                == (1, 1, 0)
    finally:
        pub.close()


async def test_gap_longer_than_the_replay_buffer_resets() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT, buffer_steps=3)
    try:
        async with following(pub.endpoint, pub.replay_endpoint) as (sub, recorder):
            base = await in_sync(pub, sub, recorder)
            dropping(pub, range(base, base + 10))
            for n in range(12):
                pub.publish([stored(n)])
            await until(lambda: 11 in recorder.ids, "the events after the gap")
            gap = f"gap {base}..{base + 9}: replay buffer starts at seq {base + 9}"
            assert recorder.log == [("reset", gap), ("event", 9), ("event", 10), ("event", 11)]
    finally:
        pub.close()


async def test_gap_without_a_replay_endpoint_resets() -> None:
    pub = KvEventPublisher(ANY_PORT)
    try:
        async with following(pub.endpoint) as (sub, recorder):
            base = await in_sync(pub, sub, recorder)
            dropping(pub, range(base + 1, base + 3))
            for n in range(5):
                pub.publish([stored(n)])
            await until(lambda: 4 in recorder.ids, "the last event")
            assert recorder.log == [("event", 0), ("reset", f"gap {base + 1}..{base + 2}: no "
                                     "replay endpoint"), ("event", 3), ("event", 4)]
    finally:
        pub.close()


async def test_replay_that_times_out_resets() -> None:
    pub = KvEventPublisher(ANY_PORT)  # no ROUTER behind the subscriber's replay endpoint
    nobody = f"tcp://127.0.0.1:{free_port()}"
    try:
        async with following(pub.endpoint, nobody, replay_timeout=0.1) as (sub, recorder):
            base = await in_sync(pub, sub, recorder)
            dropping(pub, range(base, base + 1))
            pub.publish([stored(0)])
            pub.publish([stored(1)])
            await until(lambda: 1 in recorder.ids, "the event after the gap")
            assert recorder.log == [("reset", f"gap {base}..{base}: replay timed out after "
                                     "0.1s"), ("event", 1)]
    finally:
        pub.close()


# -- restarts and kills ------------------------------------------------------------------------


async def bind_again(endpoint: str, replay: str) -> KvEventPublisher:
    """A new publisher on the old ports (the old sockets' close finishes in the background)."""
    deadline = time.monotonic() + 3
    while True:
        try:
            return KvEventPublisher(endpoint, replay)
        except zmq.ZMQError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


async def test_restarted_publisher_resets_and_its_events_arrive() -> None:
    pub = KvEventPublisher(ANY_PORT, ANY_PORT)
    try:
        async with following(pub.endpoint, pub.replay_endpoint) as (sub, recorder):
            await in_sync(pub, sub, recorder)
            pub.close()
            await until(lambda: bool(recorder.resets), "a reset")
            assert recorder.log == [("reset", "disconnected")]
            pub = await bind_again(pub.endpoint, pub.replay_endpoint or "")
            await until(lambda: sub.healthy, "the subscriber to reconnect")
            for n in range(5):
                pub.publish([stored(100 + n)])
            await in_sync(pub, sub, recorder, clear=False)  # none of the 5 lost meanwhile
            assert recorder.resets == ["disconnected"] and recorder.log[0][0] == "reset"
            assert recorder.ids[:5] == [100 + n for n in range(5)]
            assert set(recorder.ids[5:]) == {-1}
    finally:
        pub.close()


PUBLISHER_PROCESS = """
import asyncio, sys
from engines.kv_event_publisher import KvEventPublisher
from engines.kv_events import BlockStored

async def main():
    pub = KvEventPublisher("tcp://127.0.0.1:*")
    print(pub.endpoint, flush=True)
    n = 0
    while True:
        pub.publish([BlockStored((n,), None, (n,), 1)])
        n += 1
        await asyncio.sleep(0.01)

asyncio.run(main())
"""


async def test_killed_publisher_resets_within_a_second() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER_PROCESS, cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        endpoint = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        async with following(endpoint) as (sub, recorder):
            await until(lambda: bool(recorder.ids), "events from the process")
            proc.kill()
            killed = time.monotonic()
            await until(lambda: bool(recorder.resets), "a reset", timeout=1.0)
            assert recorder.resets == ["disconnected"]
            assert time.monotonic() - killed < 1.0
            assert not sub.healthy and sub.last_seq is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


# -- raw frames on the wire --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def raw_publisher() -> AsyncIterator[zmq.asyncio.Socket]:
    """An XPUB: a PUB that also hears the subscription, so nothing is lost to the slow
    joiner."""
    xpub = zmq.asyncio.Context(zmq.Context.instance()).socket(zmq.XPUB)
    try:
        xpub.bind(ANY_PORT)
        yield xpub
    finally:
        xpub.close(linger=0)


def endpoint_of(sock: zmq.asyncio.Socket) -> str:
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def payload(n: int) -> bytes:
    return encode_batch(EventBatch(1.0, (stored(n),), 0))


async def test_garbage_messages_are_counted_and_skipped() -> None:
    async with raw_publisher() as xpub, following(endpoint_of(xpub)) as (sub, recorder):
        assert await asyncio.wait_for(xpub.recv(), 2) == b"\x01"  # subscribed to ""
        for frames in ([b"one frame"], [b"", b"\x00\x01", payload(0)],
                       [b"", seq_bytes(0), payload(0), b"extra"], [b"", seq_bytes(0), b"\xc1"],
                       [b"", seq_bytes(0), payload(0)], [b"", seq_bytes(1), payload(1)]):
            await xpub.send_multipart(frames)
        await until(lambda: sub.counters.batches == 2, "the two good batches")
        assert recorder.log == [("event", 0), ("event", 1)]
        assert sub.counters.decode_errors == 4


async def test_undecodable_batch_shows_as_a_gap() -> None:
    async with raw_publisher() as xpub, following(endpoint_of(xpub)) as (sub, recorder):
        await asyncio.wait_for(xpub.recv(), 2)
        for seq, body in ((0, payload(0)), (1, b"\x92\x01"), (2, payload(2))):
            await xpub.send_multipart([b"", seq_bytes(seq), body])
        await until(lambda: 2 in recorder.ids, "the batch after the bad one")
        assert recorder.log == [("event", 0), ("reset", "gap 1..1: no replay endpoint"),
                                ("event", 2)]
        assert sub.counters.decode_errors == 1


async def test_sequence_going_back_means_the_publisher_restarted() -> None:
    async with raw_publisher() as xpub, following(endpoint_of(xpub)) as (sub, recorder):
        await asyncio.wait_for(xpub.recv(), 2)
        for seq, n in ((0, 0), (1, 1), (2, 2), (0, 100), (1, 101)):
            await xpub.send_multipart([b"", seq_bytes(seq), payload(n)])
        await until(lambda: 101 in recorder.ids, "the restarted stream")
        assert recorder.log == [("event", 0), ("event", 1), ("event", 2),
                                ("reset", "publisher restarted"), ("event", 100),
                                ("event", 101)]
        assert sub.last_seq == 1


@pytest.mark.parametrize("seq", [0, 5], ids=["from-zero", "slow-joiner"])
async def test_first_contact_without_replay_takes_the_stream_up(seq: int) -> None:
    async with raw_publisher() as xpub, following(endpoint_of(xpub)) as (sub, recorder):
        await asyncio.wait_for(xpub.recv(), 2)
        await xpub.send_multipart([b"", seq_bytes(seq), payload(seq)])
        await until(lambda: bool(recorder.ids), "the first batch")
        assert recorder.log == [("event", seq)]
        assert (sub.counters.gaps, sub.counters.replays, sub.counters.resets) == (0, 0, 0)


async def test_an_unexpected_error_resets_and_the_stream_goes_on() -> None:
    async with raw_publisher() as xpub, following(endpoint_of(xpub)) as (sub, recorder):
        await asyncio.wait_for(xpub.recv(), 2)
        apply = sub._apply

        def broken_once(seq: int, batch: EventBatch) -> None:
            sub._apply = apply  # type: ignore[method-assign]
            raise RuntimeError("boom")

        sub._apply = broken_once  # type: ignore[method-assign]
        for seq in (0, 1):
            await xpub.send_multipart([b"", seq_bytes(seq), payload(seq)])
        await until(lambda: 1 in recorder.ids, "the batch after the error")
        assert recorder.log == [("reset", "error: boom"), ("event", 1)]
