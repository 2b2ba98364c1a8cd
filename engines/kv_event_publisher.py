# SPDX-License-Identifier: Apache-2.0
"""Publishes KV-cache event batches over ZeroMQ exactly as vLLM's ``ZmqEventPublisher``
does (``vllm/distributed/kv_events.py`` at 0181ea3173e53eea8cf04a86891488e3dc89bb34), so a
consumer of vLLM's stream reads the GPU simulator's unchanged:

- a PUB socket bound on ``endpoint`` sends ``[topic, seq, payload]`` per batch: ``seq`` an
  8-byte big-endian counter from 0, ``payload`` from ``kv_events.encode_batch``;
- the last ``buffer_steps`` ``(seq, payload)`` are kept for replay;
- with ``replay_endpoint``, a ROUTER socket answers a request ``[b"", start_seq]`` (8 bytes,
  big-endian) with ``[b"", seq, payload]`` for every buffered batch with ``seq >= start``,
  then the end marker ``[b"", (-1).to_bytes(8, "big", signed=True), b""]``.

vLLM publishes from a thread fed by a queue because its scheduler is synchronous. The
simulator is asyncio, so here everything stays on the event loop instead: a PUB send never
blocks (at its high-water mark ZeroMQ drops), so ``publish`` sends at once and returns the
batch's sequence number, and the replay ROUTER is served by one task on the same loop. The
buffer is touched by one thread only, and no queue sits between a step and its batch.
Differences from vLLM: endpoints are always bound (``tcp://127.0.0.1:*`` picks a free port,
read back from ``endpoint``), and the ROUTER's send high-water mark is twice the buffer
(vLLM keeps ZeroMQ's default of 1000, and a ROUTER drops what passes it, so a long replay
from vLLM can lose batches, end marker included: the subscriber then resets).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq
import zmq.asyncio

from engines.kv_events import EventBatch, KvEvent, encode_batch

log = logging.getLogger(__name__)

END_SEQ = (-1).to_bytes(8, "big", signed=True)
"""The sequence frame that ends a replay."""


class KvEventPublisher:
    """vLLM's KV-event PUB stream (with its replay ROUTER) on the running asyncio loop.

    ``endpoint``/``replay_endpoint``: ZeroMQ addresses to bind (``tcp://127.0.0.1:*`` for a
    free port); ``buffer_steps``: batches kept for replay (vLLM's default, 10,000); ``topic``:
    first frame of every message (vLLM's default ""); ``data_parallel_rank``: stamped on each
    batch, as vLLM's publisher does (0 for a single engine); ``hwm``: the PUB socket's send
    high-water mark (vLLM's default); ``clock``: the batch timestamp, wall-clock seconds.
    Construct it inside the running loop when ``replay_endpoint`` is given.
    """

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        buffer_steps: int = 10_000,
        topic: str = "",
        *,
        data_parallel_rank: int = 0,
        hwm: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if buffer_steps < 1:
            raise ValueError(f"buffer_steps: expected at least 1, got {buffer_steps}")
        self.closed = False
        self._topic = topic.encode("utf-8")
        self._rank = data_parallel_rank
        self._clock = clock
        self._seq = itertools.count()
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        # PUB sends synchronously (never blocks); the ROUTER is awaited: one context for both
        self._pub: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
        actx = zmq.asyncio.Context(zmq.Context.instance())
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.SNDHWM, hwm)
        self._replay: zmq.asyncio.Socket | None = None
        self._replay_task: asyncio.Task[None] | None = None
        try:
            self._pub.bind(endpoint)
            if replay_endpoint is not None:
                self._replay = actx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.LINGER, 0)
                # ROUTER drops what passes its high-water mark, and its count of what the
                # peer has read lags by up to half of it: room for a whole replay, twice
                self._replay.setsockopt(zmq.SNDHWM, max(1000, 2 * (buffer_steps + 2)))
                self._replay.bind(replay_endpoint)
                self._replay_task = asyncio.get_running_loop().create_task(
                    self._serve_replay(self._replay), name="kv-event-replay")
        except BaseException:
            self.close()
            raise
        self.endpoint = self._last_endpoint(self._pub)
        self.replay_endpoint = None if self._replay is None else self._last_endpoint(self._replay)

    def publish(self, events: Sequence[KvEvent]) -> int:
        """Send ``events`` as one batch stamped with the clock now; returns its sequence
        number. Never blocks: at the high-water mark ZeroMQ drops the message (the replay
        buffer still has it)."""
        if self.closed:
            raise RuntimeError("KvEventPublisher is closed")
        seq = next(self._seq)
        payload = encode_batch(EventBatch(self._clock(), tuple(events), self._rank))
        self._buffer.append((seq, payload))
        self._send((self._topic, seq.to_bytes(8, "big"), payload))
        return seq

    def close(self) -> None:
        """Stop serving replays and close both sockets (linger 0). Idempotent."""
        self.closed = True
        if self._replay_task is not None:
            self._replay_task.cancel()
        for sock in (self._pub, self._replay):
            if sock is not None and not sock.closed:
                sock.close(linger=0)

    def _send(self, frames: tuple[bytes, bytes, bytes]) -> None:
        """The one place a batch goes onto the PUB socket (tests drop batches here)."""
        with contextlib.suppress(zmq.Again):  # only if a PUB's send ever reports EAGAIN
            self._pub.send_multipart(frames, flags=zmq.NOBLOCK)

    async def _serve_replay(self, router: zmq.asyncio.Socket) -> None:
        """Answer replay requests until closed, one at a time, as vLLM's publisher does."""
        while True:
            try:
                frames = await router.recv_multipart()
            except (asyncio.CancelledError, zmq.ZMQError):
                return
            if len(frames) != 3:
                log.warning("KV-event replay: request of %d frames ignored", len(frames))
                continue
            client, _, start_bytes = frames
            start = int.from_bytes(start_bytes, "big")
            try:
                for seq, payload in list(self._buffer):
                    if seq >= start:
                        await router.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
                await router.send_multipart((client, b"", END_SEQ, b""))
            except (asyncio.CancelledError, zmq.ZMQError):
                return

    @staticmethod
    def _last_endpoint(sock: zmq.Socket[Any]) -> str:
        value = sock.getsockopt(zmq.LAST_ENDPOINT)
        return value.decode() if isinstance(value, bytes) else str(value)
