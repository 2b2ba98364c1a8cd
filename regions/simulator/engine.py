# SPDX-License-Identifier: Apache-2.0
"""Asyncio driver of the continuous-batching model: one loop task per simulated GPU server.

The loop asks the pure ``Scheduler`` for the next iteration, waits its duration on the
injected ``Clock`` and applies it, waking the callers whose sequences produced a token.
Callers ``submit()`` a request, then iterate ``stream(seq)`` (one index per generated token,
as the engine produces it) or ``await wait(seq)``; ``abort(seq)`` frees the slot and KV at
once, which is what a client disconnect does.

Calibration (defaults in ``EngineConfig``; all figures model seconds at ``speed=1.0``)
---------------------------------------------------------------------------------------
A mid-size model on an H100-class GPU, capped at 16 sequences so that queueing, not just a
slower batch, appears near saturation (which is what makes routing decisions matter):

- prefill 16,000 tokens/s: a median conversation prompt (1,020 tokens) takes 64 ms,
  the trace mean (1,155) 72 ms, a 4,000-token prompt 250 ms;
- decode step ``12 ms * (1 + 0.04 * (batch - 1))``: 12 ms alone (83 tokens/s for one
  stream), 19.2 ms for a full batch of 16 (833 tokens/s);
- KV budget 32,768 tokens, so 16 sequences of ~2,000 tokens fit, and a few long (4k+) prompts
  make requests queue for KV before the slot limit is reached; ``max_model_len`` 16,384.

Resulting capacity on the Azure conversation trace (``bench/simulator_check.py``: engine on
a virtual clock, closed loop of 32 clients keeping it saturated, requests drawn from the
trace, mean 1,155 prompt / 211 output tokens; 600 model seconds after a 60 s warm-up):

=====  ======  ===============  ===========================================
speed  req/s   output tokens/s  unloaded TTFT / E2E, median request (1,020/129)
=====  ======  ===============  ===========================================
1.0    3.02    654              0.064 s / 1.60 s
0.6    1.82    390              0.106 s / 2.67 s
0.4    1.22    261              0.159 s / 4.00 s
=====  ======  ===============  ===========================================

So the issue's mixed fleet (2 x 1.0, 2 x 0.6, 2 x 0.4) sustains about 12.1 req/s: 8.5 req/s
is 70% load and 10.9 req/s is 90%. The same figures measured over HTTP at ``time_scale``
10 or 20 agree within a few percent when the process has CPU to spare; the bench reports the
model time lost when it does not (see ``EngineState.lost_s``).

Capacity scales linearly with ``speed``. ``time_scale`` (on the clock) makes model time run
faster than wall time without changing any of these model-time figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from regions.simulator.batching import Counters, Scheduler, SeqState, Sequence
from regions.simulator.clock import Clock, ScaledClock
from regions.simulator.config import EngineConfig
from regions.simulator.errors import SequenceAborted, SimConfigError


@dataclass(frozen=True)
class EngineState:
    """A point-in-time view of the engine, for ``/metrics`` and ``/_sim/state``.

    ``lost_s`` counts model seconds the engine could not catch up on because its process was
    starved of CPU for longer than ``max_catchup_s``: if it grows, lower ``time_scale``.
    """

    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    kv_usage: float
    hung: bool
    slow_factor: float
    counters: Counters
    lost_s: float


class Engine:
    """One simulated GPU: a scheduler driven by an asyncio task on a clock."""

    def __init__(self, config: EngineConfig | None = None, clock: Clock | None = None) -> None:
        self.config = config or EngineConfig()
        self.clock: Clock = clock or ScaledClock()
        self._sched = Scheduler(self.config)
        self._events: dict[int, asyncio.Event] = {}
        # futures of callers that only want the first token or the end (not every token)
        self._firsts: dict[int, asyncio.Future[None]] = {}
        self._ends: dict[int, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._hung = False
        self._busy_until: float | None = None
        self._lost_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the engine loop (idempotent)."""
        if self._task is None:
            self._busy_until = None
            self._task = asyncio.create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        """Stop the loop and abort every live sequence."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.abort_all()

    # -- requests ------------------------------------------------------------------------

    def submit(self, prompt_tokens: int, output_tokens: int) -> Sequence:
        """Queue a request (raises ``ContextLengthError`` if it can never fit)."""
        seq = self._sched.submit(prompt_tokens, output_tokens, self.clock.now())
        self._events[seq.seq_id] = asyncio.Event()
        self._wake.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        """Cancel a sequence, freeing its slot and KV; a no-op once it is done."""
        if self._sched.abort(seq):
            self._notify(seq)
            self._wake.set()

    def abort_all(self) -> None:
        """Cancel every live sequence (what a crash does to in-flight requests)."""
        for seq in self._sched.abort_all():
            self._notify(seq)

    async def stream(self, seq: Sequence) -> AsyncIterator[int]:
        """Yield the index of each generated token as the engine produces it.

        Raises ``SequenceAborted`` if the sequence is aborted by someone else (fault, stop).
        """
        sent = 0
        event = self._events.get(seq.seq_id)
        while True:
            while sent < seq.generated:
                yield sent
                sent += 1
            if seq.state is SeqState.FINISHED:
                return
            if seq.state is SeqState.ABORTED or event is None:
                raise SequenceAborted(f"sequence {seq.seq_id} aborted")
            await event.wait()
            event.clear()

    async def wait(self, seq: Sequence) -> Sequence:
        """Wait until the sequence has finished; raise ``SequenceAborted`` if aborted."""
        await self._milestone(self._ends, seq, lambda s: s.done)
        if seq.state is not SeqState.FINISHED:
            raise SequenceAborted(f"sequence {seq.seq_id} aborted")
        return seq

    async def first_token(self, seq: Sequence) -> Sequence:
        """Wait until the sequence has its first token (or has ended; then it raises
        ``SequenceAborted`` if it was aborted); one wake-up, not one per token."""
        await self._milestone(self._firsts, seq, lambda s: s.generated > 0 or s.done)
        if seq.generated == 0 and seq.state is not SeqState.FINISHED:
            raise SequenceAborted(f"sequence {seq.seq_id} aborted")
        return seq

    async def _milestone(self, waiting: dict[int, asyncio.Future[None]], seq: Sequence,
                         reached: Callable[[Sequence], bool]) -> None:
        if reached(seq):
            return
        future = waiting.get(seq.seq_id)
        if future is None:
            future = waiting[seq.seq_id] = asyncio.get_running_loop().create_future()
        await asyncio.shield(future)

    # -- fault knobs ---------------------------------------------------------------------

    @property
    def slow_factor(self) -> float:
        return self._sched.slow_factor

    @slow_factor.setter
    def slow_factor(self, factor: float) -> None:
        if not factor > 0:
            raise SimConfigError(f"slow_factor: must be > 0, got {factor!r}")
        self._sched.slow_factor = factor

    @property
    def hung(self) -> bool:
        return self._hung

    @hung.setter
    def hung(self, value: bool) -> None:
        """While hung the engine accepts requests but runs no iteration (a gray failure)."""
        self._hung = value
        self._busy_until = None
        self._wake.set()

    def state(self) -> EngineState:
        s = self._sched
        return EngineState(
            running=len(s.running),
            waiting=len(s.waiting),
            kv_used_tokens=s.kv_used,
            kv_capacity_tokens=self.config.kv_cache_tokens,
            kv_usage=s.kv_usage,
            hung=self._hung,
            slow_factor=s.slow_factor,
            counters=dataclasses.replace(s.counters),
            lost_s=self._lost_s,
        )

    # -- loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            step = None if self._hung else self._sched.plan()
            if step is None:
                self._busy_until = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = self.clock.now()
            if self._busy_until is None:
                start = now
            else:  # back to back: absorb the loop's lateness, within limits
                start = self._busy_until
                floor = now - self.config.max_catchup_s
                if start < floor:  # starved of CPU for too long: that time is lost
                    self._lost_s += floor - start
                    start = floor
            end = start + step.duration
            await self.clock.sleep_until(end)
            self._busy_until = end
            for seq in self._sched.complete(step, end):
                self._notify(seq)

    def _notify(self, seq: Sequence) -> None:
        event = self._events.get(seq.seq_id)
        if event is not None:
            event.set()
        if seq.generated > 0 or seq.done:
            _resolve(self._firsts.pop(seq.seq_id, None))
        if seq.done:
            self._events.pop(seq.seq_id, None)
            _resolve(self._ends.pop(seq.seq_id, None))


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)
