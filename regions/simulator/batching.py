# SPDX-License-Identifier: Apache-2.0
"""Continuous-batching scheduler: pure state, no I/O, no clock, no asyncio.

Modelled on vLLM's first-come-first-served scheduler without chunked prefill (with
``scheduling_policy`` ``priority``, vLLM's priority scheduler: the queue is ordered by
priority, then arrival, and a KV shortage preempts the lowest priority first):

- Requests wait in a FIFO queue. The head is admitted when a slot is free
  (``running < max_num_seqs``) and its KV footprint (prompt + tokens generated so far) fits in
  the budget minus the watermark. Nothing overtakes a head that does not fit.
- If anything can be admitted, the next iteration is a *prefill* of all admitted sequences
  (up to ``max_prefill_tokens``): it takes ``tokens / prefill_tokens_per_s`` and yields each
  one's first token. Running sequences do not decode meanwhile (prefill is prioritised).
- Otherwise it is a *decode* step over every running sequence: one token each, taking
  ``decode_base_ms * (1 + alpha * (batch - 1))`` plus attention over the batch's context
  tokens (``EngineConfig.decode_step_seconds``): long contexts decode slower.
- Before a decode step, if the budget cannot hold one more token per running sequence, the
  most recently admitted sequences are preempted (recompute): their KV is freed and they go
  back to the queue's head; re-admission prefills prompt + generated tokens again.

With ``chunked_prefill`` (vLLM v1's scheduler, where it is always on) there are no separate
prefill iterations: each one decodes every running sequence whose prompt is in the KV cache,
then spends what is left of its ``max_prefill_tokens`` budget on prompt chunks, first the
running sequences' unfinished prompts (oldest first), then the waiting queue's head,
admitted as above. A sequence yields its first token in the iteration that prefills the end
of its prompt. The iteration takes ``EngineConfig.mixed_step_seconds``: decodes ride along
a prefill chunk almost for free.

With LoRA (``max_loras`` > 0), a request may name an adapter. At most ``max_loras``
distinct adapters run at once: a waiting request whose adapter would be one more is passed
by (it keeps its place; the ones behind it may go first), as vLLM's schedulers do. A
request admitted with an adapter not loaded (``adapter_cache``) makes its iteration
longer by ``lora_load_s``: the engine loads it first.

With ``prefix_caching`` (vLLM v1's default), admission first looks up the longest cached
prefix of the sequence's prompt blocks (``prefix_cache``): those blocks are shared, not
allocated, and only the rest of the prompt is prefilled. The blocks a prefill computes are
cached as it computes them; a sequence that ends or is preempted leaves its blocks cached
(and evictable). KV in use counts each shared block once. With ``record_events`` the
scheduler keeps the blocks it caches and evicts in ``kv_events`` for the driver to publish.

The driver calls ``plan()`` to get the next ``Step``, waits ``step.duration`` and then calls
``complete(step, now)``. ``abort()`` may be called at any time and frees the slot and KV at
once.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass, field

from regions.simulator.adapter_cache import AdapterCache
from regions.simulator.config import EngineConfig
from regions.simulator.errors import ContextLengthError, PriorityError
from regions.simulator.prefix_cache import PrefixCache
from regions.simulator.prompt_blocks import PromptBlocks


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


GAPS_KEPT = 256  # a sequence's first gaps between tokens (what a proxy's meter keeps)


@dataclass(eq=False)
class Sequence:
    """One request inside the engine. Times are model seconds."""

    seq_id: int
    prompt_tokens: int
    output_tokens: int
    arrival: float
    state: SeqState = SeqState.WAITING
    generated: int = 0
    prefilled_once: bool = False
    prefilled: int = 0  # KV tokens computed or found cached since its admission (chunked)
    prefill_target: int = 0  # KV tokens to compute after its admission (chunked prefill)
    preemptions: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    blocks: PromptBlocks | None = None  # the prompt's full blocks (prefix caching)
    held: int = 0  # leading prompt blocks it references in the prefix cache
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at its first admission
    adapter: str | None = None  # its LoRA adapter (None: the base model)
    priority: int = 0  # lower first, under the ``priority`` scheduling policy
    token_at: float | None = None  # when its latest token came
    gaps: list[float] = field(default_factory=list)  # between its tokens, GAPS_KEPT at most

    @property
    def hashes(self) -> tuple[int, ...]:
        """Chained hashes of the prompt's full blocks (none without prefix caching)."""
        return self.blocks.hashes if self.blocks is not None else ()

    @property
    def kv_tokens(self) -> int:
        """KV-cache tokens this sequence holds (or needs) when running."""
        return self.prompt_tokens + self.generated

    @property
    def prefilling(self) -> bool:
        """Admitted, with part of its prompt (or recompute) still to prefill (chunked)."""
        return self.prefilled < self.prefill_target

    @property
    def done(self) -> bool:
        return self.state in (SeqState.FINISHED, SeqState.ABORTED)


class StepKind(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"  # chunked prefill: prompt chunks beside decodes


@dataclass(frozen=True)
class Step:
    """One engine iteration: which sequences advance, and how long it takes."""

    kind: StepKind
    seqs: tuple[Sequence, ...]
    duration: float
    chunks: tuple[int, ...] = ()  # chunked prefill: prompt tokens per seq (0: it decodes)
    loaded: tuple[str, ...] = ()  # LoRA adapters loaded first (their time is in duration)


@dataclass
class Counters:
    """Cumulative totals, exported as Prometheus counters."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    finished: int = 0
    aborted: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of which found


@dataclass(frozen=True)
class StoredBlocks:
    """Consecutive blocks newly cached: their hashes, the hash before the first (None at
    the prompt's start) and their token ids (a ``BlockStored`` KV event)."""

    hashes: tuple[int, ...]
    parent: int | None
    token_ids: tuple[int, ...]
    block_size: int


@dataclass(frozen=True)
class RemovedBlocks:
    """Cached blocks evicted (a ``BlockRemoved`` KV event)."""

    hashes: tuple[int, ...]


KvEvent = StoredBlocks | RemovedBlocks


@dataclass
class Scheduler:
    """FIFO continuous-batching scheduler over one ``EngineConfig``."""

    config: EngineConfig
    slow_factor: float = 1.0
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    record_events: bool = False
    kv_events: list[KvEvent] = field(default_factory=list)
    prefix: PrefixCache | None = field(init=False, default=None)
    adapters: AdapterCache = field(init=False)
    _ids: itertools.count = field(default_factory=itertools.count)
    _loading: list[str] = field(default_factory=list)  # adapters the next step loads

    def __post_init__(self) -> None:
        if self.config.prefix_caching:
            self.prefix = PrefixCache(self.config.block_size)
        self.adapters = AdapterCache(self.config.adapter_slots)

    # -- requests ------------------------------------------------------------------------

    def submit(self, prompt_tokens: int, output_tokens: int, now: float,
               blocks: PromptBlocks | None = None, adapter: str | None = None,
               priority: int = 0) -> Sequence:
        """Queue a request (``blocks``: its prompt's hashed blocks, for prefix caching;
        ``adapter``: its LoRA adapter; ``priority``: lower first, under the ``priority``
        policy); raise ``ContextLengthError`` if it can never fit, ``PriorityError`` for a
        priority the policy does not schedule by."""
        if priority and self.config.scheduling_policy != "priority":
            raise PriorityError(f"Got priority {priority} but Priority scheduling is not "
                                f"enabled.", "priority")
        total = prompt_tokens + output_tokens
        if total > self.config.max_model_len:
            raise ContextLengthError(
                f"This model's maximum context length is {self.config.max_model_len} tokens. "
                f"However, you requested {total} tokens ({prompt_tokens} in the messages, "
                f"{output_tokens} in the completion).",
                "max_tokens",
            )
        seq = Sequence(next(self._ids), max(prompt_tokens, 1), output_tokens, now)
        seq.adapter = adapter
        seq.priority = priority
        if self.prefix is not None and blocks is not None and blocks.hashes:
            seq.blocks = blocks
        self._enqueue(seq)
        return seq

    def _enqueue(self, seq: Sequence) -> None:
        """Into the waiting queue: at its end (fcfs), or after every sequence that goes
        before it by (priority, arrival, id) (priority)."""
        if self.config.scheduling_policy != "priority":
            self.waiting.append(seq)
            return
        at = len(self.waiting)
        key = _priority_key(seq)
        while at and _priority_key(self.waiting[at - 1]) > key:
            at -= 1
        self.waiting.insert(at, seq)

    def abort(self, seq: Sequence) -> bool:
        """Drop a sequence wherever it is; return True if it was still live."""
        if seq.done:
            return False
        if seq.state is SeqState.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        else:
            self.waiting.remove(seq)
        seq.state = SeqState.ABORTED
        self.counters.aborted += 1
        return True

    def abort_all(self) -> list[Sequence]:
        """Abort every live sequence (a crash); return them."""
        victims = [*self.running, *self.waiting]
        for seq in victims:
            self.abort(seq)
        return victims

    # -- state ---------------------------------------------------------------------------

    @property
    def kv_used(self) -> int:
        """KV tokens in use: each running sequence's own tokens, and each cached block a
        running sequence references once."""
        own = sum(s.kv_tokens for s in self.running)
        prefix = self.prefix
        if prefix is None:
            return own
        bs = prefix.block_size
        return own - bs * sum(s.held for s in self.running) + bs * prefix.referenced

    @property
    def kv_usage(self) -> float:
        return min(self.kv_used / self.config.kv_cache_tokens, 1.0)

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    # -- iterations ----------------------------------------------------------------------

    def plan(self) -> Step | None:
        """Choose the next iteration (and admit/preempt as needed); None when idle."""
        if self.config.chunked_prefill:
            return self._plan_chunked()
        admitted = self._admit()
        if admitted:
            tokens = sum(self._uncached(s) for s in admitted)
            self._evict()
            loaded = self._take_loading()
            return Step(
                StepKind.PREFILL, admitted,
                self.config.prefill_seconds(tokens, self.slow_factor)
                + len(loaded) * self.config.lora_load_s, loaded=loaded,
            )
        if not self.running:
            return None
        self._preempt_for_growth()
        self._evict()
        return Step(
            StepKind.DECODE,
            tuple(self.running),
            self.config.decode_step_seconds(len(self.running), self.slow_factor,
                                            sum(s.kv_tokens for s in self.running)),
        )

    def complete(self, step: Step, now: float) -> list[Sequence]:
        """Apply a finished iteration at model time ``now``; return the sequences it advanced."""
        advanced: list[Sequence] = []
        chunks = step.chunks or (0,) * len(step.seqs)
        for seq, chunk in zip(step.seqs, chunks, strict=True):
            if seq.state is not SeqState.RUNNING:
                continue  # aborted or preempted while the step ran
            if chunk:
                seq.prefilled += chunk
                self._cache_computed(seq, seq.prefilled)
                if seq.prefilling:
                    continue  # more of its prompt to come: no token yet
                if not seq.prefilled_once:
                    seq.prefilled_once = True
                    self.counters.prompt_tokens += seq.prompt_tokens
            elif step.kind is StepKind.PREFILL:
                self._cache_computed(seq, seq.kv_tokens)
                if not seq.prefilled_once:
                    seq.prefilled_once = True
                    self.counters.prompt_tokens += seq.prompt_tokens
            if seq.generated < seq.output_tokens:
                seq.generated += 1
                self.counters.generation_tokens += 1
                if seq.first_token_at is None:
                    seq.first_token_at = now
                elif len(seq.gaps) < GAPS_KEPT and seq.token_at is not None:
                    seq.gaps.append(now - seq.token_at)
                seq.token_at = now
            if seq.generated >= seq.output_tokens:
                seq.state = SeqState.FINISHED
                seq.finished_at = now
                self.running.remove(seq)
                self._release(seq)
                self.counters.finished += 1
            advanced.append(seq)
        return advanced

    def _plan_chunked(self) -> Step | None:
        self._preempt_for_growth()
        budget = self.config.max_prefill_tokens
        decodes = [s for s in self.running if not s.prefilling]
        budget -= len(decodes)
        pending = sum(s.prefill_target - s.prefilled for s in self.running if s.prefilling)
        if budget > pending:
            for seq in self._admit(token_budget=budget - pending):
                seq.prefill_target = seq.kv_tokens
                seq.prefilled = seq.kv_tokens - self._uncached(seq)
        self._evict()
        seqs: list[Sequence] = list(decodes)
        chunks = [0] * len(decodes)
        for seq in self.running:  # admission order: unfinished prompts, then the new ones
            if budget <= 0:
                break
            if seq.prefilling:
                chunk = min(seq.prefill_target - seq.prefilled, budget)
                seqs.append(seq)
                chunks.append(chunk)
                budget -= chunk
        if not seqs:
            return None
        prefill = sum(chunks)
        kind = StepKind.MIXED if prefill else StepKind.DECODE
        duration = self.config.mixed_step_seconds(len(decodes), prefill, self.slow_factor,
                                                  sum(s.kv_tokens for s in decodes))
        loaded = self._take_loading()
        duration += len(loaded) * self.config.lora_load_s
        return Step(kind, tuple(seqs), duration, tuple(chunks), loaded)

    def _admit(self, token_budget: int | None = None) -> tuple[Sequence, ...]:
        """Admit the queue's head while a slot and its KV are free: up to
        ``max_prefill_tokens`` of prompts (one longer prompt alone), or with a
        ``token_budget`` (chunked prefill) until that is spent, the last one in part. A
        request whose LoRA adapter would exceed ``max_loras`` is passed by."""
        cfg = self.config
        reserve = int(cfg.kv_cache_tokens * cfg.kv_watermark)
        used = self.kv_used
        batch_tokens = 0
        admitted: list[Sequence] = []
        prefix, bs = self.prefix, cfg.block_size
        active = {s.adapter for s in self.running if s.adapter} if cfg.max_loras else None
        at = 0  # the waiting request considered: the head, unless some were passed by
        while at < len(self.waiting) and len(self.running) < cfg.max_num_seqs:
            head = self.waiting[at]
            if (active is not None and head.adapter is not None
                    and head.adapter not in active and len(active) >= cfg.max_loras):
                at += 1
                continue
            hit = self._cached_prefix(head)
            compute = head.kv_tokens - hit * bs
            # cached blocks nobody references are free space until this sequence takes them
            need = compute + (bs * prefix.unreferenced(head.hashes[:hit]) if prefix and hit else 0)
            free = cfg.kv_cache_tokens - used - (reserve if self.running else 0)
            if need > free:
                break
            if token_budget is not None:
                if batch_tokens >= token_budget:
                    break
            elif admitted and batch_tokens + compute > cfg.max_prefill_tokens:
                break
            if at:
                del self.waiting[at]
            else:
                self.waiting.popleft()
            if prefix is not None:
                self._take_prefix(head, hit)
            if active is not None and head.adapter is not None:
                active.add(head.adapter)
                if not self.adapters.use(head.adapter):
                    self.adapters.load(head.adapter)
                    self._loading.append(head.adapter)
            head.state = SeqState.RUNNING
            self.running.append(head)
            admitted.append(head)
            used += need
            batch_tokens += compute
        return tuple(admitted)

    def _take_loading(self) -> tuple[str, ...]:
        loading, self._loading = tuple(self._loading), []
        return loading

    # -- prefix caching ------------------------------------------------------------------

    def _cached_prefix(self, seq: Sequence) -> int:
        """Leading prompt blocks of ``seq`` in the cache; at least its last token is always
        computed (as vLLM does, for its logits)."""
        prefix, hashes = self.prefix, seq.hashes
        if prefix is None or not hashes:
            return 0
        bs = prefix.block_size
        return prefix.lookup(hashes, min(len(hashes), (seq.kv_tokens - 1) // bs,
                                         seq.prompt_tokens // bs))

    def _take_prefix(self, seq: Sequence, hit: int) -> None:
        assert self.prefix is not None
        if hit:
            self.prefix.acquire(seq.hashes[:hit])
        seq.held = hit
        if seq.preemptions == 0:  # vLLM counts a request's first scheduling only
            seq.cached_tokens = hit * self.prefix.block_size
            self.counters.prefix_cache_queries += seq.prompt_tokens
            self.counters.prefix_cache_hits += seq.cached_tokens

    def _uncached(self, seq: Sequence) -> int:
        """KV tokens of ``seq`` to compute at its admission."""
        return seq.kv_tokens - seq.held * self.config.block_size

    def _cache_computed(self, seq: Sequence, computed: int) -> None:
        """``computed`` KV tokens of ``seq`` now exist: cache its full prompt blocks."""
        prefix, hashes = self.prefix, seq.hashes
        if prefix is None or not hashes:
            return
        bs = prefix.block_size
        upto = min(len(hashes), computed // bs, seq.prompt_tokens // bs)
        if upto <= seq.held:
            return
        start = seq.held
        runs = prefix.store(hashes[start:upto])
        seq.held = upto
        if self.record_events and seq.blocks is not None:
            for a, b in runs:
                first, end = start + a, start + b
                self.kv_events.append(StoredBlocks(
                    hashes[first:end], hashes[first - 1] if first else None,
                    tuple(seq.blocks.token_ids(first, end)), bs))

    def _release(self, seq: Sequence) -> None:
        if self.prefix is not None and seq.held:
            self.prefix.release(seq.hashes[:seq.held])
        seq.held = 0

    def _evict(self) -> None:
        """Forget cached free blocks beyond the space the running sequences leave."""
        prefix = self.prefix
        if prefix is None or not prefix.free_cached:
            return
        bs = prefix.block_size
        free_blocks = self.config.kv_cache_tokens // bs - -(-self.kv_used // bs)
        gone = prefix.evict(free_blocks)
        if gone and self.record_events:
            self.kv_events.append(RemovedBlocks(tuple(gone)))

    def reset_prefix_cache(self) -> None:
        """Forget every cached block no running sequence uses (vLLM's
        ``/reset_prefix_cache``)."""
        if self.prefix is not None:
            gone = self.prefix.clear()
            if gone and self.record_events:
                self.kv_events.append(RemovedBlocks(tuple(gone)))

    def _preempt_for_growth(self) -> None:
        budget = self.config.kv_cache_tokens
        by_priority = self.config.scheduling_policy == "priority"
        while len(self.running) > 1 and self.kv_used + len(self.running) > budget:
            if by_priority:  # the lowest priority, latest arrival (vLLM v1)
                victim = max(self.running, key=_priority_key)
                self.running.remove(victim)
            else:  # the most recently admitted
                victim = self.running.pop()
            self._release(victim)
            victim.state = SeqState.WAITING
            victim.preemptions += 1
            self.counters.preemptions += 1
            if by_priority:
                self._enqueue(victim)
            else:
                self.waiting.appendleft(victim)


def _priority_key(seq: Sequence) -> tuple[int, float, int]:
    return seq.priority, seq.arrival, seq.seq_id
