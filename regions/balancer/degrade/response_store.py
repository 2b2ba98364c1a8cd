# SPDX-License-Identifier: Apache-2.0
"""Where cached answers are kept: in the shared state, so every balancer of a region
shares them (``RedisStore``), or in the balancer's memory without one (``MemoryStore``).

Both are bounded in bytes: a put that would pass the bound first drops the entries closest
to expiring. Every entry expires after its ``ttl``. A store error is never a request's:
``get`` answers None and ``put`` drops the answer (the caller counts it).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError


class ResponseStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...
    async def put(self, key: str, value: bytes, ttl_s: float, max_bytes: int) -> bool: ...


class MemoryStore:
    """An LRU of entries in this process, at most ``max_bytes`` in all."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.size = 0

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[1]

    async def put(self, key: str, value: bytes, ttl_s: float, max_bytes: int) -> bool:
        if len(value) > max_bytes:
            return False
        if key in self._entries:
            self._drop(key)
        while self._entries and self.size + len(value) > max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = (time.monotonic() + ttl_s, value)
        self.size += len(value)
        return True

    def _drop(self, key: str) -> None:
        _, value = self._entries.pop(key)
        self.size -= len(value)


# KEYS: entry, index (zset: entry key -> expiry ms), sizes (hash), total
# ARGV: value, ttl ms, now ms, max bytes, entry-key prefix
_PUT = """
local now, ttl, max = tonumber(ARGV[3]), tonumber(ARGV[2]), tonumber(ARGV[4])
local size = string.len(ARGV[1])
if size > max then return 0 end
local total = tonumber(redis.call('GET', KEYS[4]) or '0')
local function drop(k)
  local s = tonumber(redis.call('HGET', KEYS[3], k) or '0')
  redis.call('HDEL', KEYS[3], k)
  redis.call('ZREM', KEYS[2], k)
  redis.call('DEL', k)
  total = total - s
end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do drop(k) end
if redis.call('HEXISTS', KEYS[3], KEYS[1]) == 1 then drop(KEYS[1]) end
while total + size > max do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #first == 0 then break end
  drop(first[1])
end
if total < 0 then total = 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], size)
redis.call('SET', KEYS[4], total + size)
return 1
"""


class RedisStore:
    """Entries in the shared state under ``<prefix>:cache:<region>:``, bounded per region."""

    def __init__(self, client: aioredis.Redis, prefix: str, region: str) -> None:
        self.client = client
        # the region as the hash tag: the four keys one script touches share a Cluster slot
        self.base = f"{prefix}:cache:{{{region}}}"
        self._put = client.register_script(_PUT)

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self.client.get(f"{self.base}:e:{key}")
        except (RedisError, OSError):
            return None
        return value if isinstance(value, bytes) else None

    async def put(self, key: str, value: bytes, ttl_s: float, max_bytes: int) -> bool:
        keys = [f"{self.base}:e:{key}", f"{self.base}:index", f"{self.base}:sizes",
                f"{self.base}:total"]
        try:
            stored = await self._put(keys=keys, args=[value, max(1, int(ttl_s * 1000)),
                                                      int(time.time() * 1000), max_bytes])
        except (RedisError, OSError):
            return False
        return bool(stored)
