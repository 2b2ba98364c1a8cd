# SPDX-License-Identifier: Apache-2.0
"""Asyncio driver of the continuous-batching model: one loop task per simulated GPU server.

The loop asks the pure ``Scheduler`` for the next iteration, waits its duration on the
injected ``Clock`` and applies it, waking the callers whose sequences produced a token.
Callers ``submit()`` a request, then iterate ``stream(seq)`` (one index per generated token,
as the engine produces it) or ``await wait(seq)``; ``abort(seq)`` frees the slot and KV at
once, which is what a client disconnect does.

Calibration (defaults in ``EngineConfig``; all figures model seconds at ``speed=1.0``)
---------------------------------------------------------------------------------------
A mid-size (8B) model on an H100-class GPU with vLLM's default batch limits
(``EngineConfig`` says where each number comes from):

- prefill 16,000 tokens/s: a median conversation prompt (1,020 tokens) takes 64 ms,
  the trace mean (1,155) 72 ms, a 4,000-token prompt 250 ms;
- decode step ``12 ms * (1 + 0.035 * (batch - 1))`` plus 0.05 ms per 1,000 context tokens
  in the batch (attention reading the KV): with conversation-sized contexts (1,200 tokens)
  12.06 ms alone (83 tokens/s for one stream), 19.3 ms for a batch of 16 (831 tokens/s),
  134 ms for 256 (1,904 tokens/s); sixteen 12k-token contexts take 27.9 ms;
- 256 sequence slots and a KV budget of 432,000 tokens; ``max_model_len`` 16,384.

Capacity on the Azure conversation trace (``bench/routing_matrix.py``'s measure: the engine
alone on a virtual clock, a closed loop of twice as many clients as slots keeping it
saturated, requests drawn from the trace; 300 model seconds after a 60 s warm-up): 5.26 req/s
at speed 1.0, 3.19 at 0.6, 2.19 at 0.4. Unloaded, the median request
(1,020 prompt / 129 output tokens) takes 0.064 s to its first token and 1.60 s in all at
speed 1.0. The routing matrix (``benchkit/matrix.py``) also runs 16 and 64 slots, chunked
prefill and other traces; it measures each cell's capacity the same way. Figures measured
over HTTP at a ``time_scale`` agree within a few percent when the process has CPU to spare;
the benches report the model time lost when it does not (``EngineState.lost_s``).

Capacity scales linearly with ``speed``. ``time_scale`` (on the clock) makes model time run
faster than wall time without changing any of these model-time figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from regions.simulator.adapter_cache import AdapterCache
from regions.simulator.batching import Counters, KvEvent, Scheduler, SeqState, Sequence
from regions.simulator.clock import Clock, ScaledClock
from regions.simulator.config import EngineConfig
from regions.simulator.errors import SequenceAborted, SimConfigError
from regions.simulator.prompt_blocks import PromptBlocks

KvEventSink = Callable[[list[KvEvent]], None]


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
    prefix_cached_blocks: int = 0


class Engine:
    """One simulated GPU: a scheduler driven by an asyncio task on a clock."""

    def __init__(self, config: EngineConfig | None = None, clock: Clock | None = None,
                 kv_event_sink: KvEventSink | None = None) -> None:
        """``kv_event_sink`` receives the blocks the prefix cache stores and evicts, after
        each iteration (a KV event publisher)."""
        self.config = config or EngineConfig()
        self.clock: Clock = clock or ScaledClock()
        self._sched = Scheduler(self.config, record_events=kv_event_sink is not None)
        self._kv_event_sink = kv_event_sink
        self._events: dict[int, asyncio.Event] = {}
        # futures of callers that only want the first token or the end (not every token)
        self._firsts: dict[int, asyncio.Future[None]] = {}
        self._ends: dict[int, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._hung = False
        self._busy_until: float | None = None
        self._lost_s = 0.0
        # adapters /v1/load_lora_adapter asked for, loaded between iterations, in order
        self._loads: list[tuple[str, asyncio.Future[None]]] = []

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

    def submit(self, prompt_tokens: int, output_tokens: int,
               blocks: PromptBlocks | None = None, adapter: str | None = None,
               priority: int = 0) -> Sequence:
        """Queue a request (raises ``ContextLengthError`` if it can never fit,
        ``PriorityError`` for a priority the engine does not schedule by); ``blocks`` are its
        prompt's hashed blocks, for the prefix cache; ``adapter`` its LoRA adapter."""
        seq = self._sched.submit(prompt_tokens, output_tokens, self.clock.now(), blocks,
                                 adapter, priority)
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

    # -- LoRA adapters -------------------------------------------------------------------

    async def load_adapter(self, name: str) -> None:
        """Load ``name`` into memory (``config.lora_load_s``), between iterations: every
        running sequence waits meanwhile, as in vLLM. Returns once it is loaded."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loads.append((name, future))
        self._wake.set()
        await future

    def unload_adapter(self, name: str) -> bool:
        """Forget ``name``'s weights (False if they were not loaded); a running request
        that uses it finishes, a waiting one loads it again when admitted."""
        return self._sched.adapters.remove(name)

    @property
    def adapters(self) -> AdapterCache:
        return self._sched.adapters

    def adapter_requests(self) -> tuple[set[str], set[str]]:
        """The adapters of the running requests and of the waiting ones (vLLM's
        ``lora_requests_info``)."""
        return ({s.adapter for s in self._sched.running if s.adapter is not None},
                {s.adapter for s in self._sched.waiting if s.adapter is not None})

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
            prefix_cached_blocks=len(s.prefix) if s.prefix is not None else 0,
        )

    def reset_prefix_cache(self) -> None:
        """Forget every cached block that no running request uses."""
        self._sched.reset_prefix_cache()
        self._flush_kv_events()

    def _flush_kv_events(self) -> None:
        events = self._sched.kv_events
        if events and self._kv_event_sink is not None:
            self._sched.kv_events = []
            self._kv_event_sink(events)

    # -- loop ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if self._loads and not self._hung:
                await self._load_pending()
                continue
            step = None if self._hung else self._sched.plan()
            self._flush_kv_events()
            if step is None:
                self._busy_until = None
                self._wake.clear()
                await self._wake.wait()
                continue
            end = await self._busy_for(step.duration)
            for seq in self._sched.complete(step, end):
                self._notify(seq)
            self._flush_kv_events()

    async def _busy_for(self, duration: float) -> float:
        """Run ``duration`` model seconds from where the engine left off; return the end."""
        now = self.clock.now()
        if self._busy_until is None:
            start = now
        else:  # back to back: absorb the loop's lateness, within limits
            start = self._busy_until
            floor = now - self.config.max_catchup_s
            if start < floor:  # starved of CPU for too long: that time is lost
                self._lost_s += floor - start
                start = floor
        end = start + duration
        await self.clock.sleep_until(end)
        self._busy_until = end
        return end

    async def _load_pending(self) -> None:
        loads, self._loads = self._loads, []
        try:
            await self._busy_for(len(loads) * self.config.lora_load_s)
        except BaseException:
            for _, future in loads:
                future.cancel()
            raise
        for name, future in loads:
            self._sched.adapters.load(name)  # even if its caller has gone
            if not future.done():
                future.set_result(None)

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
