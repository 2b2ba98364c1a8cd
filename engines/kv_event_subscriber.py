# SPDX-License-Identifier: Apache-2.0
"""Follows one engine's KV-event stream (vLLM's, or ``kv_event_publisher``'s) on asyncio,
so a consumer can keep an exact index of the blocks that engine has cached.

The consumer gives two callbacks. ``on_events(events)`` gets each batch's events in
sequence order, each batch once. ``on_reset(reason)`` means "what you built so far may be
wrong: start again from empty"; the events that follow are applied to the empty index.
Applying any unbroken run of the stream to an empty index gives a subset of what the
engine holds (a block is reported only after it was stored, and its removal follows it),
so after a reset the index is incomplete for a while but never claims a block the engine
lacks.

How the sequence numbers are followed (``last_seq`` is the last batch applied, None before
the first and after a reset):

- on connecting with ``last_seq`` None and a replay endpoint, everything the publisher's
  buffer holds is asked for and its unbroken run up to the newest is applied (the whole
  history while the buffer still has seq 0), so an idle engine's cache is known at once;
  live batches it already had are dropped;
- first contact (``last_seq`` None) with ``seq`` > 0: the PUB/SUB "slow joiner" lost the
  earlier batches. With a replay endpoint, batches from 0 are asked for and the unbroken
  run ending just before ``seq`` is applied; without one, the stream is taken up at
  ``seq``. Not a reset;
- ``seq`` = ``last_seq`` + 1: applied;
- ``seq`` > ``last_seq`` + 1, a gap: the missing batches are asked for on the replay
  endpoint and applied in order, duplicates dropped; if they cannot all be had (no replay
  endpoint, buffer too short, a hole, a timeout) ``on_reset("gap A..B: why")``, then the
  unbroken run ending before ``seq`` and ``seq`` itself are applied;
- ``seq`` <= ``last_seq``: the publisher restarted (its count starts again at 0):
  ``on_reset("publisher restarted")``, then ``seq`` is handled as a first contact;
- a ZeroMQ socket monitor on the SUB socket reports the TCP connection: when it drops, the
  messages it had delivered are applied, ``healthy`` turns False and
  ``on_reset("disconnected")`` follows (ZeroMQ heartbeats every ``heartbeat_s`` close a
  silent connection after three intervals); the reconnection is a new first contact;
- a message that is not ``[topic, 8-byte seq, batch]`` is counted in ``decode_errors`` and
  skipped; its sequence number is not taken, so the next batch shows the gap.

Replays go over a DEALER socket (a request ``[b"", start_seq]``, answers ``[b"", seq,
payload]`` until the end marker); after a timeout it is replaced, so late answers never
mix into the next request. One case is not told apart at once: if the loop stalls (a
replay waiting for its timeout) while the publisher restarts, the new publisher's batches
already queued are read as the old stream's, until the disconnect, handled right after
them, resets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from engines.kv_event_publisher import END_SEQ
from engines.kv_events import EventBatch, KvEvent, KvEventDecodeError, decode_batch

log = logging.getLogger(__name__)

OnEvents = Callable[[list[KvEvent]], None]
OnReset = Callable[[str], None]
Replayed = list[tuple[int, EventBatch]]


@dataclass(frozen=True, slots=True)
class SubscriberCounters:
    """What a subscriber has seen since it started."""

    batches: int = 0  # batches applied, live or replayed
    events: int = 0  # events handed to on_events
    gaps: int = 0  # jumps forward in the live sequence
    replays: int = 0  # replay requests sent
    resets: int = 0  # on_reset calls
    decode_errors: int = 0  # messages, live or replayed, that were not a batch
    unknown_events: int = 0  # events of a type the codec does not know, skipped


class KvEventSubscriber:
    """One engine's KV-event stream, followed on the running asyncio loop.

    ``endpoint``: the engine's PUB address (vLLM's ``--kv-events-config`` ``endpoint``, as
    seen from here); ``replay_endpoint``: its ROUTER address, if it has one; ``on_events``,
    ``on_reset``: see the module docstring (called on the loop; they must not block);
    ``topic``: subscription prefix (vLLM's default "" takes every topic); ``replay_timeout``:
    seconds to wait for a whole replay; ``heartbeat_s``: ZeroMQ heartbeat interval.
    """

    def __init__(
        self,
        endpoint: str,
        replay_endpoint: str | None = None,
        *,
        on_events: OnEvents,
        on_reset: OnReset,
        topic: str = "",
        replay_timeout: float = 1.0,
        heartbeat_s: float = 0.25,
    ) -> None:
        self._endpoint = endpoint
        self._replay_endpoint = replay_endpoint
        self._on_events = on_events
        self._on_reset = on_reset
        self._topic = topic.encode("utf-8")
        self._replay_timeout = replay_timeout
        self._heartbeat_ms = max(1, round(heartbeat_s * 1000))
        self._ctx = zmq.asyncio.Context(zmq.Context.instance())
        self._sub: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._dealer: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_seq: int | None = None
        self._replayed_to: int | None = None  # set by the catch-up replay until a newer seq
        self._healthy = False
        self._n = {f.name: 0 for f in fields(SubscriberCounters)}

    @property
    def healthy(self) -> bool:
        """Connected to the publisher, as the socket monitor last reported."""
        return self._healthy

    @property
    def last_seq(self) -> int | None:
        """The sequence number of the last batch applied; None before one and after a reset."""
        return self._last_seq

    @property
    def counters(self) -> SubscriberCounters:
        """A snapshot of the counters."""
        return SubscriberCounters(**self._n)

    async def start(self) -> None:
        """Connect (ZeroMQ connects in the background and retries) and start following."""
        if self._task is not None:
            raise RuntimeError("KvEventSubscriber already started")
        sub = self._sub = self._ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.HEARTBEAT_IVL, self._heartbeat_ms)
        sub.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * self._heartbeat_ms)
        sub.setsockopt(zmq.SUBSCRIBE, self._topic)
        self._monitor = sub.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        sub.connect(self._endpoint)
        if self._replay_endpoint is not None:
            self._dealer = self._new_dealer(self._replay_endpoint)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kv-event-sub")

    async def stop(self) -> None:
        """Stop following and close the sockets. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sub is not None and not self._sub.closed:
            self._sub.disable_monitor()
        for sock in (self._monitor, self._sub, self._dealer):
            if sock is not None and not sock.closed:
                sock.close(linger=0)
        self._healthy = False

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._sub is not None and self._monitor is not None  # set by start()
        poller = zmq.asyncio.Poller()
        poller.register(self._sub, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        while True:
            await poller.poll()
            try:
                while await self._step():
                    pass
            except Exception as exc:  # a bug or a broken socket must not end the stream
                log.exception("KV events from %s: failed", self._endpoint)
                self._reset(f"error: {exc}")
                await asyncio.sleep(0.1)

    async def _step(self) -> bool:
        """Handle one monitor event, else one message; False when neither is waiting."""
        assert self._sub is not None and self._monitor is not None
        if _readable(self._monitor):
            message = parse_monitor_message(await self._monitor.recv_multipart())
            await self._on_monitor_event(message["event"])
        elif _readable(self._sub):
            await self._on_message(await self._sub.recv_multipart())
        else:
            return False
        return True

    async def _on_monitor_event(self, event: int) -> None:
        assert self._sub is not None
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._healthy = True
            if self._last_seq is None and self._dealer is not None:
                await self._catch_up()
        elif event == zmq.EVENT_DISCONNECTED and self._healthy:
            self._healthy = False
            # what the dropped connection delivered comes first (ZeroMQ reconnects only
            # after its reconnect interval, 100 ms, so these are all from it)
            while _readable(self._sub):
                await self._on_message(await self._sub.recv_multipart())
            self._reset("disconnected")

    async def _on_message(self, frames: list[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self._n["decode_errors"] += 1
            log.warning("KV events from %s: message of %d frames skipped (expected topic, "
                        "8-byte seq, batch)", self._endpoint, len(frames))
            return
        seq = int.from_bytes(frames[1], "big")
        try:
            batch = decode_batch(frames[2])
        except KvEventDecodeError as exc:
            self._n["decode_errors"] += 1
            log.warning("KV events from %s: seq %d skipped: %s", self._endpoint, seq, exc)
            return
        await self._on_batch(seq, batch)

    async def _catch_up(self) -> None:
        """On connecting, whatever the replay buffer holds (everything since seq 0 while it
        has it), so an idle engine's cache is known before its next batch."""
        run, _ = await self._fetch(0, None)
        self._apply_all(run)
        if run:
            self._replayed_to = run[-1][0]

    async def _on_batch(self, seq: int, batch: EventBatch) -> None:
        if self._replayed_to is not None and seq <= self._replayed_to:
            return  # published before the catch-up replay was served, delivered live after
        self._replayed_to = None
        last = self._last_seq
        if last is not None and seq <= last:
            self._reset("publisher restarted")
            last = None
        if last is None:
            if seq > 0 and self._replay_endpoint is not None:
                run, _ = await self._fetch(0, seq)
                self._apply_all(run)
        elif seq > last + 1:
            self._n["gaps"] += 1
            run, why = await self._fetch(last + 1, seq)
            if not run or run[0][0] != last + 1:
                self._reset(f"gap {last + 1}..{seq - 1}: {why}")
            self._apply_all(run)
        self._apply(seq, batch)

    # -- replay --------------------------------------------------------------------------

    async def _fetch(self, start: int, stop: int | None) -> tuple[Replayed, str]:
        """Batches ``start``..``stop``-1 (``stop`` None: to the newest) from the replay socket:
        the unbroken run of them that ends at ``stop``-1 (at the newest received), maybe
        empty, maybe starting after ``start``; and why not all of them."""
        if self._dealer is None or self._replay_endpoint is None:
            return [], "no replay endpoint"
        self._n["replays"] += 1
        received: dict[int, EventBatch] = {}
        why = ""
        try:
            async with asyncio.timeout(self._replay_timeout):
                await self._dealer.send_multipart((b"", start.to_bytes(8, "big")))
                while (frames := await self._dealer.recv_multipart())[1:2] != [END_SEQ]:
                    self._take_replayed(frames, start, stop, received)
        except TimeoutError:
            why = f"replay timed out after {self._replay_timeout:g}s"
            self._dealer.close(linger=0)  # late answers must not reach the next request
            self._dealer = self._new_dealer(self._replay_endpoint)
        run: Replayed = []
        seq = (max(received, default=start - 1) if stop is None else stop - 1)
        while seq >= start and seq in received:
            run.append((seq, received[seq]))
            seq -= 1
        run.reverse()
        if not why and seq >= start:
            if not received:
                why = "replay had none of them"
            elif min(received) > start:
                why = f"replay buffer starts at seq {min(received)}"
            else:
                why = f"replay lacks seq {seq}"
        return run, why

    def _take_replayed(self, frames: list[bytes], start: int, stop: int | None,
                       received: dict[int, EventBatch]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self._n["decode_errors"] += 1
            return
        seq = int.from_bytes(frames[1], "big")
        if start <= seq and (stop is None or seq < stop):  # others: duplicates, or come live
            try:
                received[seq] = decode_batch(frames[2])
            except KvEventDecodeError as exc:
                self._n["decode_errors"] += 1
                log.warning("KV events from %s: replayed seq %d skipped: %s",
                            self._replay_endpoint, seq, exc)

    def _new_dealer(self, endpoint: str) -> zmq.asyncio.Socket:
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVHWM, 0)  # a replay is bounded by the publisher's buffer
        dealer.connect(endpoint)
        return dealer

    # -- applying ------------------------------------------------------------------------

    def _apply_all(self, run: Replayed) -> None:
        for seq, batch in run:
            self._apply(seq, batch)

    def _apply(self, seq: int, batch: EventBatch) -> None:
        self._last_seq = seq
        self._n["batches"] += 1
        self._n["events"] += len(batch.events)
        self._n["unknown_events"] += batch.unknown_events
        if batch.events:
            _call(self._on_events, list(batch.events))

    def _reset(self, reason: str) -> None:
        self._last_seq = self._replayed_to = None
        self._n["resets"] += 1
        log.warning("KV events from %s: reset: %s", self._endpoint, reason)
        _call(self._on_reset, reason)


def _readable(sock: zmq.asyncio.Socket) -> bool:
    events = sock.getsockopt(zmq.EVENTS)
    return isinstance(events, int) and bool(events & zmq.POLLIN)


def _call(callback: Callable[[Any], None], arg: Any) -> None:
    """A consumer's callback; its exception is logged, never ends the stream."""
    try:
        callback(arg)
    except Exception:
        log.exception("KV-event callback %r failed", callback)
