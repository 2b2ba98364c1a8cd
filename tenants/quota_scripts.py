"""The Lua scripts that keep tenant quotas atomically inside Redis, and their replies.

Both run on the server's clock (``TIME``), so every balancer agrees on time. The arithmetic is
GCRA, as described in :mod:`tenants.local_limits`; a bucket's key holds its ``tat`` (seconds,
as text with microseconds) and expires when the bucket is full again, so an idle tenant leaves
nothing behind. Keys, per tenant (``{tenant}`` in braces: a Redis Cluster hash tag, so all
four are on one shard)::

    {p}:quota:{tenant}:requests        string  tat of the request bucket
    {p}:quota:{tenant}:input_tokens    string  tat of the input-token bucket
    {p}:quota:{tenant}:output_tokens   string  tat of the output-token bucket
    {p}:quota:{tenant}:concurrent      zset    request id -> lease expiry (server seconds)

Redis stays the source of truth; a gate takes *slices* of a bucket from it, as "charge these
units now", and spends them locally (:mod:`tenants.slices`).

``TAKE`` decides one admission, or tops up a gate's slices. Per rate bucket it gets ``need``
(units that must fit, all or nothing across the buckets; -1: not checked), ``extra`` (units
to add if they fit, best effort: the slice) and, for output tokens, ``pending`` (tokens the
gate has streamed but not yet charged, counted as used without being charged). A bucket
spanning ``W`` seconds (its burst times ``T``: a minute without one) admits ``need`` when
``max(tat, now) + pending·T + min(need·T, W) - W <= now``; the output bucket is checked with
``need = 0``, so it refuses only while in debt. If every check
passes, each bucket is charged ``need`` plus as much of ``extra`` as it has room for,
and with a concurrency limit a lease is added to the set after dropping expired ones (and
the gate's finished requests' leases, passed along, are released first). Its reply: the
refusing limit (``""``: admitted), the wait in seconds, the count of leases held (-1:
unlimited), each rate bucket's backlog ``tat - now`` (``""``: unlimited), then the units
charged on each.

``SETTLE`` adds signed units to the buckets (output tokens owed; a negative count returns an
unspent slice or refunds, never past a full bucket), refreshes the leases of streaming
requests and releases those of finished ones. Its reply: the three backlogs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tenants.local_limits import CONCURRENT, RATE_LIMITS, WINDOW_S

_PRELUDE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000

local function fmt(x) return string.format('%.6f', x) end

local function tat_of(key)
  local tat = tonumber(redis.call('GET', key))
  if tat and tat > now then return tat end
  return now
end

local function store(key, tat)
  if tat > now then
    redis.call('SET', key, fmt(tat), 'PX', math.max(1, math.ceil((tat - now) * 1000)))
  else
    redis.call('DEL', key)
  end
end

local function keep_leases(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', key, math.max(1, math.ceil((tonumber(last[2]) - now) * 1000)))
  end
end

local function backlogs(reply, interval)
  for i = 1, 3 do
    if interval[i] > 0 then
      reply[#reply + 1] = fmt(tat_of(KEYS[i]) - now)
    else
      reply[#reply + 1] = ''
    end
  end
  return reply
end
"""

# KEYS: requests, input_tokens, output_tokens, concurrent
# ARGV: 1-3 emission intervals (0: unlimited), 4-6 seconds each bucket spans, 7-9 need (-1:
# not checked), 10-12 extra, 13 output tokens pending, 14 concurrency limit (-1: no lease),
# 15 request id, 16 lease seconds, 17 wait reported for a full concurrency set, 18.. ids
# whose leases to release
TAKE = _PRELUDE + """
local names = {'requests', 'input_tokens', 'output_tokens'}
local interval, window, need, extra = {}, {}, {}, {}
for i = 1, 3 do
  interval[i] = tonumber(ARGV[i])
  window[i] = tonumber(ARGV[3 + i])
  need[i] = tonumber(ARGV[6 + i])
  extra[i] = tonumber(ARGV[9 + i])
end
local pending = {0, 0, tonumber(ARGV[13])}
local slots = tonumber(ARGV[14])
local id = ARGV[15]
local lease = tonumber(ARGV[16])
for j = 18, #ARGV do redis.call('ZREM', KEYS[4], ARGV[j]) end
local refused, wait = '', 0
local tat = {}
for i = 1, 3 do
  if interval[i] > 0 then
    tat[i] = tat_of(KEYS[i])
    if need[i] >= 0 then
      local w = tat[i] + pending[i] * interval[i]
        + math.min(need[i] * interval[i], window[i]) - window[i] - now
      -- within a microsecond is rounding, as in local_limits.gcra_wait (TOLERANCE_S)
      if w > 1e-6 and w > wait then refused, wait = names[i], w end
    end
  end
end
local held, in_use = false, -1
if slots >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  in_use = redis.call('ZCARD', KEYS[4])
  held = redis.call('ZSCORE', KEYS[4], id)
  local busy = tonumber(ARGV[17])
  if not held and in_use >= slots and busy > wait then refused, wait = 'concurrent', busy end
end
local granted = {0, 0, 0}
if refused == '' then
  for i = 1, 3 do
    if interval[i] > 0 then
      local n = math.max(need[i], 0)
      local free = now + window[i] - tat[i] - pending[i] * interval[i]
      local room = math.floor(free / interval[i] + 1e-9) - n
      granted[i] = n + math.max(0, math.min(extra[i], room))
      if granted[i] > 0 then
        tat[i] = tat[i] + granted[i] * interval[i]
        store(KEYS[i], tat[i])
      end
    end
  end
  if slots >= 0 then
    if not held then in_use = in_use + 1 end
    redis.call('ZADD', KEYS[4], now + lease, id)
  end
end
if slots >= 0 or #ARGV >= 18 then keep_leases(KEYS[4]) end
local reply = backlogs({refused, fmt(wait), tostring(in_use)}, interval)
for i = 1, 3 do reply[#reply + 1] = string.format('%.0f', granted[i]) end
return reply
"""

# KEYS: requests, input_tokens, output_tokens, concurrent
# ARGV: 1-3 emission intervals (0: unlimited), 4-6 units to add (negative: returned),
# 7 lease seconds, 8 count of ids to refresh, then the ids to refresh, then those to release
SETTLE = _PRELUDE + """
local interval = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
for i = 1, 3 do
  local units = tonumber(ARGV[3 + i])
  if interval[i] > 0 and units ~= 0 then
    store(KEYS[i], math.max(tat_of(KEYS[i]) + units * interval[i], now))
  end
end
local lease = tonumber(ARGV[7])
local refresh = tonumber(ARGV[8])
if #ARGV > 8 then
  for j = 9, 8 + refresh do redis.call('ZADD', KEYS[4], 'XX', now + lease, ARGV[j]) end
  for j = 9 + refresh, #ARGV do redis.call('ZREM', KEYS[4], ARGV[j]) end
  keep_leases(KEYS[4])
end
return backlogs({}, interval)
"""

TAKE_SHA = hashlib.sha1(TAKE.encode()).hexdigest()
SETTLE_SHA = hashlib.sha1(SETTLE.encode()).hexdigest()

NOT_CHECKED = -1  # a ``need`` that ``TAKE`` does not check
NO_LEASE = -1  # a concurrency limit of -1: ``TAKE`` takes no lease


def quota_keys(prefix: str, tenant: str) -> list[str]:
    """The keys of both scripts: the three rate buckets, then the concurrency set."""
    # the tenant as the hash tag: the four keys one script touches share a Cluster slot
    return [f"{prefix}:quota:{{{tenant}}}:{name}" for name in (*RATE_LIMITS, CONCURRENT)]


@dataclass(frozen=True)
class Take:
    """One ``TAKE``'s arguments, per rate bucket name (a bucket left out: nothing; a window
    left out: a minute)."""

    intervals: Mapping[str, float]
    need: Mapping[str, int]
    extra: Mapping[str, int]
    windows: Mapping[str, float] = field(default_factory=dict)
    output_pending: float = 0.0
    slots: int = NO_LEASE
    request_id: str = ""
    lease_s: float = 0.0
    busy_wait_s: float = 0.0
    releases: Sequence[str] = ()

    def args(self) -> list[object]:
        return [
            *(self.intervals.get(name, 0.0) for name in RATE_LIMITS),
            *(self.windows.get(name, WINDOW_S) for name in RATE_LIMITS),
            *(self.need.get(name, NOT_CHECKED) for name in RATE_LIMITS),
            *(self.extra.get(name, 0) for name in RATE_LIMITS),
            self.output_pending, self.slots, self.request_id, self.lease_s, self.busy_wait_s,
            *self.releases,
        ]


@dataclass(frozen=True)
class Taken:
    """``TAKE``'s reply: ``refused_by`` (None: admitted), ``wait_s``, the leases in use (-1:
    unlimited), each limited bucket's backlog in seconds, and the units charged on each."""

    refused_by: str | None
    wait_s: float
    in_use: int
    backlogs: Mapping[str, float]
    granted: Mapping[str, int]

    @classmethod
    def from_reply(cls, reply: Sequence[bytes | str]) -> Taken:
        text = _texts(reply)
        return cls(text[0] or None, max(0.0, float(text[1])), int(text[2]),
                   _backlogs(text[3:6]),
                   {name: int(float(units)) for name, units in zip(RATE_LIMITS, text[6:9],
                                                                   strict=True)})


@dataclass(frozen=True)
class Settle:
    """One ``SETTLE``'s arguments: signed units per bucket, leases to refresh and release."""

    intervals: Mapping[str, float]
    units: Mapping[str, float]
    lease_s: float = 0.0
    refresh: Sequence[str] = ()
    release: Sequence[str] = ()

    def args(self) -> list[object]:
        return [
            *(self.intervals.get(name, 0.0) for name in RATE_LIMITS),
            *(self.units.get(name, 0) for name in RATE_LIMITS),
            self.lease_s, len(self.refresh), *self.refresh, *self.release,
        ]


def settled_backlogs(reply: Sequence[bytes | str]) -> dict[str, float]:
    """``SETTLE``'s reply: each limited bucket's backlog in seconds."""
    return _backlogs(_texts(reply))


def _texts(reply: Sequence[bytes | str]) -> list[str]:
    return [part.decode() if isinstance(part, bytes) else str(part) for part in reply]


def _backlogs(texts: Sequence[str]) -> dict[str, float]:
    return {name: float(text) for name, text in zip(RATE_LIMITS, texts, strict=True) if text}
