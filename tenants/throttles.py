"""Quota refusals per tenant, counted in the shared state: how often each tenant was throttled.

A balancer records each request it refuses over a tenant's quota (429) or because the quota
state is down for a ``redis-down closed`` tenant (503) into a ``ThrottleLedger`` in memory,
flushed about once a second in one pipeline (a flood of refusals must not become a flood of
writes) with ``HINCRBY`` into an hourly bucket ``{p}:throttle:h:{hour}`` (kept
``KEEP_HOURS_S``) and a per-minute bucket ``{p}:throttle:m:{minute}`` (kept
``KEEP_MINUTES_S``), field ``tenant|region|status|limit`` (``limit``: the quota that refused:
``requests``, ``input_tokens``, ``output_tokens``, ``concurrent``, ``state_unavailable``).
While the state is unreachable the counts wait in memory and are flushed when it answers.

``throttles_between`` sums the buckets of a time range like ``tenants.usage.usage_between``:
whole hours from the hourly buckets, the minutes at either end from the minute ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from types import TracebackType

from state.aio import AsyncStateStore
from state.errors import StateError
from state.guard import describe, redis_errors
from state.tasks import cancel_and_wait

log = logging.getLogger(__name__)

KEEP_HOURS_S = 400 * 86400
KEEP_MINUTES_S = 2 * 86400
FLUSH_S = 1.0


@dataclass(frozen=True)
class ThrottleKey:
    tenant: str
    region: str
    status: int      # 429 over quota, 503 quota state down (redis-down closed)
    limit: str       # the limit that refused

    def field(self) -> str:
        return "|".join((self.tenant, self.region, str(self.status), self.limit))

    @classmethod
    def from_field(cls, field: str) -> ThrottleKey | None:
        parts = field.split("|")
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])


@dataclass(frozen=True)
class ThrottleRow:
    key: ThrottleKey
    refused: int

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self.key), "refused": self.refused}


def minute_key(store: AsyncStateStore, minute: int) -> str:
    return f"{store.keys.prefix}:throttle:m:{minute}"


def hour_key(store: AsyncStateStore, hour: int) -> str:
    return f"{store.keys.prefix}:throttle:h:{hour}"


class ThrottleLedger:
    """One balancer's refusals not yet flushed; an async context manager that flushes every
    ``flush_s`` and once more on exit."""

    def __init__(self, store: AsyncStateStore, flush_s: float = FLUSH_S) -> None:
        self.store = store
        self.flush_s = flush_s
        self._counts: dict[tuple[str, str], int] = defaultdict(int)  # (bucket, field)
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def record(self, tenant: str, region: str, status: int, limit: str | None,
               at: float | None = None) -> None:
        """Count one refusal (synchronous, no I/O: safe on the request path)."""
        minute = int((time.time() if at is None else at) // 60)
        field = ThrottleKey(tenant, region, status, limit or "unknown").field()
        for bucket in (minute_key(self.store, minute), hour_key(self.store, minute // 60)):
            self._counts[(bucket, field)] += 1

    @property
    def pending(self) -> int:
        return sum(self._counts.values()) // 2

    async def flush(self) -> bool:
        """Write what is pending; False (keeping it) when the state is unreachable."""
        if not self._counts:
            return True
        counts = dict(self._counts)
        try:
            with redis_errors(describe(self.store.client)):
                async with self.store.client.pipeline(transaction=False) as pipe:
                    for (bucket, field), value in counts.items():
                        pipe.hincrby(bucket, field, value)
                    for bucket in {bucket for bucket, _ in counts}:
                        keep = KEEP_MINUTES_S if ":throttle:m:" in bucket else KEEP_HOURS_S
                        pipe.expire(bucket, keep)
                    await pipe.execute()
        except StateError as exc:
            if not self._failing:
                log.warning("throttles: state unavailable, keeping %d refusals to flush: %s",
                            sum(counts.values()) // 2, exc)
            self._failing = True
            return False
        for key, value in counts.items():  # what was recorded meanwhile stays
            left = self._counts[key] - value
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]
        if self._failing:
            log.info("throttles: state reachable again, flushed")
        self._failing = False
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            await self.flush()

    async def __aenter__(self) -> ThrottleLedger:
        self._task = asyncio.create_task(self._run(), name="throttle-ledger")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
        with contextlib.suppress(StateError):
            await self.flush()


async def throttles_between(store: AsyncStateStore, start: float, end: float,
                            tenant: str | None = None) -> list[ThrottleRow]:
    """Refusals counted in ``[start, end)`` (wall clock seconds, whole minutes: a partial
    minute at either end counts whole), optionally of one tenant; raises ``StateError``."""
    first, last = int(start // 60), math.ceil(end / 60)
    buckets: list[str] = []
    minute = first
    while minute < last:
        if minute % 60 == 0 and minute + 60 <= last:
            buckets.append(hour_key(store, minute // 60))
            minute += 60
        else:
            buckets.append(minute_key(store, minute))
            minute += 1
    with redis_errors(describe(store.client)):
        async with store.client.pipeline(transaction=False) as pipe:
            for bucket in buckets:
                pipe.hgetall(bucket)
            replies = await pipe.execute()
    sums: dict[ThrottleKey, int] = defaultdict(int)
    for reply in replies:
        for raw_field, raw_value in reply.items():
            field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
            key = ThrottleKey.from_field(field)
            if key is None or (tenant is not None and key.tenant != tenant):
                continue
            sums[key] += int(raw_value)
    return [ThrottleRow(k, v) for k, v in sorted(
        sums.items(), key=lambda kv: (kv[0].tenant, kv[0].region, kv[0].status, kv[0].limit))]
