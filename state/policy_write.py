"""Storing a policy version in one step on the server (a Lua script, like ``hysteresis``).

The script checks the writer's expectation (``If-Match``: the version, and optionally the
start of the digest, the writer last read), gives the policy the next version, never lower
than the writer's ``at_least`` (a writer that knows newer versions than a reset store
holds continues after them), names a new epoch when the record is new, writes the fields
and publishes the change, all or nothing.

Returns ``{1, version, epoch}`` when stored, ``{0, version, digest}`` (what the store holds)
when the expectation failed.
"""

from __future__ import annotations

SCRIPT = """
local key = KEYS[1]
local current = tonumber(redis.call('HGET', key, 'version') or '0') or 0
local digest = redis.call('HGET', key, 'digest') or ''
local epoch = redis.call('HGET', key, 'epoch') or ''
if ARGV[1] ~= '' then
  local wanted = ARGV[2]
  if tonumber(ARGV[1]) ~= current or string.sub(digest, 1, string.len(wanted)) ~= wanted then
    return {0, current, digest}
  end
end
local version = math.max(current + 1, tonumber(ARGV[3]))
if current == 0 or epoch == '' then
  epoch = ARGV[4]
end
redis.call('HSET', key, 'version', version, 'epoch', epoch, unpack(ARGV, 6))
redis.call('PUBLISH', ARGV[5], key)
return {1, version, epoch}
"""
