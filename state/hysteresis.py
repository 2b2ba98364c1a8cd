"""Rise/fall hysteresis applied atomically inside Redis, so concurrent workers cannot race.

One Lua script per probe result: it bumps the success or failure streak and flips ``up``:

- unknown (never probed) -> up on the first success; -> down after ``fall`` failures in a row;
- up -> down after ``fall`` failures in a row;
- down -> up after ``rise`` successes in a row.

A result is ignored when its probe id was already applied (a redelivered task) or when it is
older than the stored one (an out-of-order result), which makes probe tasks idempotent. The
key's name is published on the change channel when ``up`` changes, and when a target that
is up fails its first probe in a row or passes one after failing: the global tier answers
for a region whose balancer is failing (not yet down) with the short degraded TTL, so that
clients already hold short-lived answers when it goes down.
"""

from __future__ import annotations

import enum

SCRIPT = """
local key = KEYS[1]
local ok = ARGV[1] == '1'
local rise = tonumber(ARGV[2])
local fall = tonumber(ARGV[3])
local now = ARGV[4]
local probe_id = ARGV[5]
local cur = redis.call('HMGET', key, 'up', 'ok_streak', 'fail_streak', 'checked_at', 'probe_id')
if probe_id ~= '' and cur[5] == probe_id then return 0 end
if cur[4] and tonumber(cur[4]) > tonumber(now) then return 0 end
local up = cur[1] or ''
local oks = tonumber(cur[2] or '0')
local fails = tonumber(cur[3] or '0')
local suspect_before = up == '1' and fails > 0
if ok then oks = oks + 1; fails = 0 else fails = fails + 1; oks = 0 end
local new = up
if ok then
  if up == '' or (up == '0' and oks >= rise) then new = '1' end
elseif up ~= '0' and fails >= fall then
  new = '0'
end
redis.call('HSET', key, 'up', new, 'ok_streak', oks, 'fail_streak', fails,
  'checked_at', now, 'probe_id', probe_id,
  'status', ARGV[6], 'latency_ms', ARGV[7], 'error', ARGV[8])
if new ~= up then
  redis.call('HSET', key, 'changed_at', now)
  redis.call('PUBLISH', ARGV[9], key)
  return 2
end
if up == '1' and (fails > 0) ~= suspect_before then
  redis.call('PUBLISH', ARGV[9], key)
end
return 1
"""


class ProbeOutcome(enum.IntEnum):
    """What applying one probe result did."""

    IGNORED = 0  # duplicate or out-of-order result
    RECORDED = 1  # streaks updated, state unchanged
    CHANGED = 2  # ``up`` flipped (or was set for the first time)


def script_args(
    *,
    ok: bool,
    rise: int,
    fall: int,
    now: float,
    probe_id: str,
    status: int | None,
    latency_ms: float | None,
    error: str,
    channel: str,
) -> list[str]:
    """ARGV for :data:`SCRIPT`, in order."""
    if rise < 1 or fall < 1:
        raise ValueError(f"rise and fall must be >= 1 (got rise={rise}, fall={fall})")
    return [
        "1" if ok else "0",
        str(rise),
        str(fall),
        repr(float(now)),
        probe_id,
        "" if status is None else str(status),
        "" if latency_ms is None else repr(float(latency_ms)),
        error[:200],
        channel,
    ]
