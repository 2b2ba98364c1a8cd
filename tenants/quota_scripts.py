"""The Lua scripts that enforce tenant quotas atomically inside Redis, and their replies.

Both run on the server's clock (``TIME``), so every balancer agrees on time. The arithmetic is
GCRA, as described in :mod:`tenants.local_limits`; a bucket's key holds its ``tat`` (seconds,
as text with microseconds) and expires when the bucket is full again, so an idle tenant leaves
nothing behind. Keys, per tenant::

    {p}:quota:{tenant}:requests        string  tat of the request bucket
    {p}:quota:{tenant}:input_tokens    string  tat of the input-token bucket
    {p}:quota:{tenant}:output_tokens   string  tat of the output-token bucket
    {p}:quota:{tenant}:concurrent      zset    request id -> lease expiry (server seconds)

``ADMIT`` checks every limit first and writes only if all of them admit (all or nothing):
1 on the request bucket, ``input_tokens`` on the input one, nothing on the output one (which
refuses only while in debt), and a lease in the concurrency set after dropping expired ones.
Its reply: the refusing limit (``""``: admitted), the wait in seconds, the count of leases
held (-1: unlimited), then each rate bucket's backlog ``tat - now`` (``""``: unlimited).

``CHARGE`` adds output tokens (a negative count refunds, never past a full bucket) and
refreshes the request's lease, or releases it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from tenants.local_limits import CONCURRENT, RATE_LIMITS, Bucket, Decision

_PRELUDE = """
local WINDOW = 60
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
"""

# KEYS: requests, input_tokens, output_tokens, concurrent
# ARGV: three emission intervals (0: unlimited), input tokens, concurrency limit (-1:
# unlimited), request id, lease seconds, wait reported for a full concurrency set
ADMIT = _PRELUDE + """
local names = {'requests', 'input_tokens', 'output_tokens'}
local interval = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
local cost = {1, tonumber(ARGV[4]), 0}
local slots = tonumber(ARGV[5])
local id = ARGV[6]
local lease = tonumber(ARGV[7])
local refused, wait = '', 0
local tat = {}
for i = 1, 3 do
  if interval[i] > 0 then
    tat[i] = tat_of(KEYS[i])
    local w = tat[i] + math.min(cost[i] * interval[i], WINDOW) - WINDOW - now
    if w > wait then refused, wait = names[i], w end
  end
end
local held, in_use = false, -1
if slots >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  in_use = redis.call('ZCARD', KEYS[4])
  held = redis.call('ZSCORE', KEYS[4], id)
  local busy = tonumber(ARGV[8])
  if not held and in_use >= slots and busy > wait then refused, wait = 'concurrent', busy end
end
if refused == '' then
  for i = 1, 3 do
    if interval[i] > 0 and cost[i] > 0 then
      tat[i] = tat[i] + cost[i] * interval[i]
      store(KEYS[i], tat[i])
    end
  end
  if slots >= 0 then
    if not held then in_use = in_use + 1 end
    redis.call('ZADD', KEYS[4], now + lease, id)
    keep_leases(KEYS[4])
  end
end
local reply = {refused, fmt(wait), tostring(in_use)}
for i = 1, 3 do
  if interval[i] > 0 then reply[#reply + 1] = fmt(tat[i] - now) else reply[#reply + 1] = '' end
end
return reply
"""

# KEYS: output_tokens, concurrent
# ARGV: output emission interval (0: unlimited), tokens, request id, lease seconds (0: no
# concurrency limit), '1' to release the lease
CHARGE = _PRELUDE + """
local interval = tonumber(ARGV[1])
local tokens = tonumber(ARGV[2])
local lease = tonumber(ARGV[4])
if interval > 0 and tokens ~= 0 then
  store(KEYS[1], math.max(tat_of(KEYS[1]) + tokens * interval, now))
end
if lease > 0 then
  if ARGV[5] == '1' then
    redis.call('ZREM', KEYS[2], ARGV[3])
  else
    redis.call('ZADD', KEYS[2], 'XX', now + lease, ARGV[3])
    keep_leases(KEYS[2])
  end
end
return 1
"""

ADMIT_SHA = hashlib.sha1(ADMIT.encode()).hexdigest()
CHARGE_SHA = hashlib.sha1(CHARGE.encode()).hexdigest()


def quota_keys(prefix: str, tenant: str) -> list[str]:
    """The keys of ``ADMIT``: the three rate buckets, then the concurrency set."""
    return [f"{prefix}:quota:{tenant}:{name}" for name in (*RATE_LIMITS, CONCURRENT)]


def decision_from_reply(reply: Sequence[bytes | str], limits: dict[str, float]) -> Decision:
    """Read ``ADMIT``'s reply; ``limits`` are the per-minute rates it was called with."""
    text = [part.decode() if isinstance(part, bytes) else str(part) for part in reply]
    backlogs = dict(zip(RATE_LIMITS, text[3:6], strict=True))
    buckets = {name: Bucket.from_backlog(limit, float(backlogs[name]))
               for name, limit in limits.items()}
    return Decision(text[0] or None, max(0.0, float(text[1])), buckets)
