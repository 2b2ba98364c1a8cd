"""Quota refusals per tenant, counted in the shared state: how often each tenant was throttled.

A balancer records each request it refuses over a tenant's quota (429) or because the quota
state is down for a ``redis-down closed`` tenant (503) into a ``ThrottleLedger`` in memory,
flushed about once a second in one pipeline (a flood of refusals must not become a flood of
writes) with ``HINCRBY`` into an hourly bucket ``{p}:throttle:h:{hour}`` and a per-minute
bucket ``{p}:throttle:m:{minute}`` (``tenants.time_buckets``, with their lifetimes),
field ``tenant|region|status|limit`` (``limit``: the quota that refused: ``requests``,
``input_tokens``, ``output_tokens``, ``concurrent``, ``state_unavailable``).
While the state is unreachable the counts wait in memory and are flushed when it answers.

``throttles_between`` sums the buckets of a time range like ``tenants.usage.usage_between``:
whole hours from the hourly buckets, the minutes at either end from the minute ones.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass

from state.aio import AsyncStateStore
from tenants.time_buckets import FLUSH_S, BucketLedger, read_buckets


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


class ThrottleLedger(BucketLedger):
    """One balancer's refusals not yet flushed; an async context manager that flushes every
    ``flush_s`` and once more on exit."""

    noun = "refusals"
    counts = True

    def __init__(self, store: AsyncStateStore, flush_s: float = FLUSH_S) -> None:
        super().__init__(store, "throttle", flush_s)

    def record(self, tenant: str, region: str, status: int, limit: str | None,
               at: float | None = None) -> None:
        """Count one refusal (synchronous, no I/O: safe on the request path)."""
        field = ThrottleKey(tenant, region, status, limit or "unknown").field()
        self.add(time.time() if at is None else at, field, 1)

    @property
    def pending(self) -> int:
        return int(sum(self._pending_amounts())) // 2


async def throttles_between(store: AsyncStateStore, start: float, end: float,
                            tenant: str | None = None) -> list[ThrottleRow]:
    """Refusals counted in ``[start, end)`` (wall clock seconds, whole minutes: a partial
    minute at either end counts whole), optionally of one tenant; raises ``StateError``."""
    sums: dict[ThrottleKey, int] = defaultdict(int)
    for field, value in await read_buckets(store, "throttle", start, end):
        key = ThrottleKey.from_field(field)
        if key is None or (tenant is not None and key.tenant != tenant):
            continue
        sums[key] += int(value)
    return [ThrottleRow(k, v) for k, v in sorted(
        sums.items(), key=lambda kv: (kv[0].tenant, kv[0].region, kv[0].status, kv[0].limit))]
