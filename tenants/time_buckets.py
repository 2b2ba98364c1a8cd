"""Counters in the shared state by minute and by hour, written from memory in batches.

A ``BucketLedger`` adds amounts to fields of a per-minute bucket ``{p}:{name}:m:{minute}``
(kept ``KEEP_MINUTES_S``) and an hourly one ``{p}:{name}:h:{hour}`` (kept
``KEEP_HOURS_S``) in memory, and writes them about once a second in one atomic script
(``HINCRBY`` for a ledger of counts, ``HINCRBYFLOAT`` otherwise), so a flood of events is not a
flood of writes. Each write is a numbered batch applied at most once (``tenants.flush_script``):
a batch whose reply was lost is sent again, unchanged, and counts once. While the state is
unreachable the amounts wait in memory (the switch is logged once) and are written when it
answers; an async context manager flushes every ``flush_s`` and once more on exit.
``read_buckets`` reads a time range back: whole hours from the hourly buckets, the minutes at
either end from the minute ones.

The usage accounting (``tenants.usage``) and the refusal counts (``tenants.throttles``) are
both kept this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections import defaultdict
from collections.abc import Iterator
from types import TracebackType

from state.aio import AsyncStateStore
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait
from tenants.flush_script import SCRIPT, Batch, Target, script_call

log = logging.getLogger(__name__)

KEEP_HOURS_S = 400 * 86400
KEEP_MINUTES_S = 2 * 86400
FLUSH_S = 1.0


def minute_bucket(store: AsyncStateStore, name: str, minute: int) -> str:
    return f"{store.keys.prefix}:{name}:m:{minute}"


def hour_bucket(store: AsyncStateStore, name: str, hour: int) -> str:
    return f"{store.keys.prefix}:{name}:h:{hour}"


class BucketLedger:
    """Amounts per (bucket, field) not yet written, and the batch being written. Subclasses
    that keep a log hand its entries over with ``_take_entries`` and name the stream in
    ``_target``."""

    noun = "entries"  # what ``pending`` counts, for the log
    counts = False  # whole numbers only: written with HINCRBY
    max_entries = 1000  # log entries in one batch (one script call)

    def __init__(self, store: AsyncStateStore, name: str, flush_s: float = FLUSH_S) -> None:
        self.store = store
        self.name = name
        self.flush_s = flush_s
        self.ledger_id = uuid.uuid4().hex[:16]  # names this ledger's batches
        self.duplicates = 0  # batches the state already had (a retry after a lost reply)
        self._amounts: dict[tuple[str, str], float] = defaultdict(float)
        self._minutes = minute_bucket(store, name, 0)[:-1]  # the minute buckets' prefix
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._minute = -1
        self._buckets: tuple[str, ...] = ()
        self._seq = 0
        self._batch: Batch | None = None  # sent, not known to be written: sent again as is
        self._script = store.client.register_script(SCRIPT)

    def add(self, at: float, field: str, amount: float) -> None:
        """Add ``amount`` to ``field`` of the buckets of ``at`` (synchronous, no I/O)."""
        minute = int(at // 60)
        if minute != self._minute:  # the bucket names change once a minute
            self._minute = minute
            self._buckets = (minute_bucket(self.store, self.name, minute),
                             hour_bucket(self.store, self.name, minute // 60))
        amounts = self._amounts
        for bucket in self._buckets:
            amounts[(bucket, field)] += amount

    @property
    def pending(self) -> int:
        """What is waiting to be written, counted in ``noun``."""
        raise NotImplementedError

    def _pending_amounts(self) -> Iterator[float]:
        """Every amount not yet known to be written (the batch's and the new ones)."""
        yield from self._amounts.values()
        if self._batch is not None:
            yield from self._batch.amounts.values()

    async def flush(self) -> bool:
        """Write what is pending, batch by batch; False (keeping it, the unanswered batch
        as it was) when the state is unreachable."""
        for _ in range(2 + self.pending // self.max_entries):  # what is pending now, bounded
            batch = self._batch or self._next_batch()
            if batch is None:
                break
            self._batch = batch
            keys, args = script_call(batch, self._target(), self._ttl)
            try:
                with redis_errors(describe(self.store.client)):
                    applied = await self._script(keys=keys, args=args)
            except StateError as exc:
                if not self._failing:
                    log.warning("%s: state unavailable, keeping %d %s to flush: %s",
                                self.name, self.pending, self.noun, exc)
                self._failing = True
                return False
            self._batch = None
            if not applied:
                self.duplicates += 1
                log.info("%s: flush %s was already written (its reply was lost): "
                         "counted once", self.name, batch.flush_id(self.ledger_id))
            if self._failing:
                log.info("%s: state reachable again, flushed", self.name)
            self._failing = False
        return True

    def _next_batch(self) -> Batch | None:
        """The next batch: every amount so far and the oldest log entries (None: nothing)."""
        entries = self._take_entries(self.max_entries)
        amounts = {key: value for key, value in self._amounts.items() if abs(value) >= 1e-12}
        self._amounts = defaultdict(float)
        if not amounts and not entries:
            return None
        self._seq += 1
        return Batch(self._seq, amounts, entries)

    def _ttl(self, bucket: str) -> int:
        return KEEP_MINUTES_S if bucket.startswith(self._minutes) else KEEP_HOURS_S

    def _target(self) -> Target:
        """Where batches go: the ledger's mark (and its log stream, in a subclass)."""
        return Target(self._mark(), integer=self.counts)

    def _mark(self) -> str:
        return f"{self.store.keys.prefix}:{self.name}:flushed:{self.ledger_id}"

    def _take_entries(self, limit: int) -> list[str]:
        """Up to ``limit`` log entries, oldest first, taken out of what is pending."""
        return []

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()

    async def __aenter__(self) -> BucketLedger:
        self._task = asyncio.create_task(self._run(), name=f"{self.name}-ledger")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
        with contextlib.suppress(StateError):
            await self.flush()


def buckets_between(store: AsyncStateStore, name: str, start: float, end: float) -> list[str]:
    """The buckets of ``[start, end)`` in whole minutes (a partial minute at either end
    counts whole): hourly ones for whole hours, minute ones around them."""
    first, last = int(start // 60), math.ceil(end / 60)
    buckets: list[str] = []
    minute = first
    while minute < last:
        if minute % 60 == 0 and minute + 60 <= last:
            buckets.append(hour_bucket(store, name, minute // 60))
            minute += 60
        else:
            buckets.append(minute_bucket(store, name, minute))
            minute += 1
    return buckets


async def read_buckets(store: AsyncStateStore, name: str, start: float,
                       end: float) -> Iterator[tuple[str, float]]:
    """Every (field, amount) of the buckets of ``[start, end)``; raises ``StateError``."""
    with redis_errors(describe(store.client)):
        async with store.client.pipeline(transaction=False) as pipe:
            for bucket in buckets_between(store, name, start, end):
                pipe.hgetall(bucket)
            replies = await pipe.execute()
    return ((field.decode() if isinstance(field, bytes) else str(field), float(value))
            for reply in replies for field, value in reply.items())
