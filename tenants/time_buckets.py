"""Counters in the shared state by minute and by hour, written from memory in batches.

A ``BucketLedger`` adds amounts to fields of a per-minute bucket ``{p}:{name}:m:{minute}``
(kept ``KEEP_MINUTES_S``) and an hourly one ``{p}:{name}:h:{hour}`` (kept
``KEEP_HOURS_S``) in memory, and writes them about once a second in one pipeline
(``HINCRBY`` for a ledger of counts, ``HINCRBYFLOAT`` otherwise), so a flood of events is not a
flood of writes. While the state is unreachable the amounts wait in memory (the switch is
logged once) and are written when it answers; an async context manager flushes every
``flush_s`` and once more on exit. ``read_buckets`` reads a time range back: whole hours
from the hourly buckets, the minutes at either end from the minute ones.

The usage accounting (``tenants.usage``) and the refusal counts (``tenants.throttles``) are
both kept this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import defaultdict
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from state.aio import AsyncStateStore
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

KEEP_HOURS_S = 400 * 86400
KEEP_MINUTES_S = 2 * 86400
FLUSH_S = 1.0


def minute_bucket(store: AsyncStateStore, name: str, minute: int) -> str:
    return f"{store.keys.prefix}:{name}:m:{minute}"


def hour_bucket(store: AsyncStateStore, name: str, hour: int) -> str:
    return f"{store.keys.prefix}:{name}:h:{hour}"


class BucketLedger:
    """Amounts per (bucket, field) not yet written. Subclasses may write more in the same
    pipeline (``_queue_more``) and drop it once written (``_written_more``)."""

    noun = "entries"  # what ``pending`` counts, for the log
    counts = False  # whole numbers only: written with HINCRBY

    def __init__(self, store: AsyncStateStore, name: str, flush_s: float = FLUSH_S) -> None:
        self.store = store
        self.name = name
        self.flush_s = flush_s
        self._amounts: dict[tuple[str, str], float] = defaultdict(float)
        self._minutes = minute_bucket(store, name, 0)[:-1]  # the minute buckets' prefix
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._minute = -1
        self._buckets: tuple[str, ...] = ()

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

    async def flush(self) -> bool:
        """Write what is pending; False (keeping it) when the state is unreachable."""
        amounts, more = dict(self._amounts), self._more()
        if not amounts and not more:
            return True
        try:
            with redis_errors(describe(self.store.client)):
                async with self.store.client.pipeline(transaction=False) as pipe:
                    for (bucket, field), value in amounts.items():
                        if self.counts:
                            pipe.hincrby(bucket, field, int(value))
                        else:
                            pipe.hincrbyfloat(bucket, field, value)
                    for bucket in {bucket for bucket, _ in amounts}:
                        minute = bucket.startswith(self._minutes)
                        pipe.expire(bucket, KEEP_MINUTES_S if minute else KEEP_HOURS_S)
                    self._queue_more(pipe, more)
                    await pipe.execute()
        except StateError as exc:
            if not self._failing:
                log.warning("%s: state unavailable, keeping %d %s to flush: %s", self.name,
                            self.pending, self.noun, exc)
            self._failing = True
            return False
        for key, value in amounts.items():  # what was added meanwhile stays
            left = self._amounts[key] - value
            if abs(left) < 1e-9:
                del self._amounts[key]
            else:
                self._amounts[key] = left
        self._written_more(more)
        if self._failing:
            log.info("%s: state reachable again, flushed", self.name)
        self._failing = False
        return True

    def _more(self) -> list[Any]:
        """What else is pending, besides the amounts."""
        return []

    def _queue_more(self, pipe: Any, more: list[Any]) -> None:
        """Queue the writes of ``more`` on ``pipe``."""

    def _written_more(self, more: list[Any]) -> None:
        """``more`` was written."""

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
