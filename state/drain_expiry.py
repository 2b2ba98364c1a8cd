"""Remove a drain flag whose ttl has run out, atomically, in the state server (Lua).

The flag is removed only if it still carries an end (``... until T``) and ``T`` is at most
the given time: a drain set again since, without a ttl or with a later end, stays. The
change channel is told, as every drain write does.

KEYS: the drain hash. ARGV: the field, the time (seconds, wall clock), the change channel
(an argument, not a key: one key per script, as Redis Cluster wants).
Returns 1 when the flag was removed, else 0.
"""

SCRIPT = """
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return 0
end
local ends = tonumber(string.match(value, ' until (%S+)$'))
if ends == nil or ends > tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[3], KEYS[1])
return 1
"""
