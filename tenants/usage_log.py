"""How far behind its readers the usage log is: the billing lag.

The usage log (``tenants.usage``) keeps an entry ``LOG_RETENTION_S`` and no longer, so a
reader that falls further behind loses entries. Two kinds of readers are followed:

- a reader of ``GET /api/v1/usage/log`` that names itself (``consumer=billing``): the page
  it asks for after an entry id says it has read up to that id, kept in the hash
  ``{p}:usage:log:readers`` (field: the reader's name, value: ``<entry id> <unix seconds>``);
- a Redis consumer group on the stream (``XREADGROUP``): read up to its last delivered id,
  less what it has not acknowledged.

A reader's lag is the age (on the server's clock) of the oldest entry it has not read, 0
when it has read everything: ``director_usage_log_lag_seconds{consumer}`` on the admin API,
with the retention beside it (``director_usage_log_retention_seconds``) for the alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from state.aio import AsyncStateStore
from state.guard import describe, redis_errors
from tenants.usage import log_key

CONSUMER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


@dataclass(frozen=True)
class LogLag:
    """The usage log now: its size, its oldest entry's age, each reader's lag (seconds)."""

    entries: int = 0
    oldest_age_s: float = 0.0
    consumers: dict[str, float] = field(default_factory=dict)


def readers_key(store: AsyncStateStore) -> str:
    return f"{log_key(store)}:readers"


def entry_ms(entry_id: str) -> int:
    """The millisecond timestamp of a stream entry id (``<ms>-<seq>``)."""
    return int(entry_id.partition("-")[0])


async def record_position(store: AsyncStateStore, consumer: str, entry_id: str,
                          now: float) -> None:
    """``consumer`` has read the log up to ``entry_id``; raises ValueError on a bad name or
    id (checked by the caller: an API request)."""
    if not CONSUMER.fullmatch(consumer):
        raise ValueError("consumer: 1 to 64 of A-Z a-z 0-9 _ . -")
    if not ENTRY_ID.fullmatch(entry_id):
        raise ValueError("after: an entry id (<ms>-<seq>) to record a consumer's position")
    with redis_errors(describe(store.client)):
        await store.client.hset(readers_key(store), consumer, f"{entry_id} {now:.3f}")


async def log_lag(store: AsyncStateStore) -> LogLag:
    """The log's size and oldest entry age, and the lag of every reader; raises
    ``StateError``."""
    key = log_key(store)
    client = store.client
    with redis_errors(describe(client)):
        seconds, micros = await client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        length = int(await client.xlen(key))
        first = await client.xrange(key, "-", "+", count=1)
        positions = {_text(k): _text(v).split(" ")[0]
                     for k, v in (await client.hgetall(readers_key(store))).items()}
        groups = await client.xinfo_groups(key) if length else []
        consumers = {name: await _lag_after(client, key, after, now_ms)
                     for name, after in positions.items() if ENTRY_ID.fullmatch(after)}
        for group in groups:
            name = f"group:{_text(group['name'])}"
            lag = await _lag_after(client, key, _text(group["last-delivered-id"]), now_ms)
            if int(group.get("pending") or 0):
                summary = await client.xpending(key, group["name"])
                if summary.get("min"):
                    lag = max(lag, (now_ms - entry_ms(_text(summary["min"]))) / 1000)
            consumers[name] = lag
    oldest = (now_ms - entry_ms(_text(first[0][0]))) / 1000 if first else 0.0
    return LogLag(length, max(0.0, oldest), consumers)


async def _lag_after(client: aioredis.Redis, key: str, after: str, now_ms: int) -> float:
    """Age of the first entry after ``after``; 0 when there is none."""
    following = await client.xrange(key, f"({after}", "+", count=1)
    if not following:
        return 0.0
    return max(0.0, (now_ms - entry_ms(_text(following[0][0]))) / 1000)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
