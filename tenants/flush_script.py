"""One flush of a ledger, applied at most once however often it is sent.

A flush is a batch with an id, ``<ledger>:<seq>``: the ledger (a random id per process)
numbers its batches 1, 2, ... and sends batch ``n + 1`` only once batch ``n`` is known to
be written. The script keeps each ledger's last applied number in
``{p}:{name}:flushed:{ledger}`` (kept ``MARK_TTL_S``, renewed by every flush) and applies a
batch only when its number is higher, all in one atomic step: so a batch sent again after a
timeout whose first attempt did land (the reply was lost) counts once, and a batch that did
not land counts when it is sent again.

A batch adds its amounts to the buckets' fields (``HINCRBY`` for counts, ``HINCRBYFLOAT``
otherwise), renews the buckets' lifetimes and appends its log entries to a stream trimmed by
age: ``XADD ... MINID ~ <now - retention>`` (the server's clock), so an entry is kept for the
retention window however many others arrive, and none is kept much longer.

Arguments::

    KEYS  mark, log stream (the mark again when there is none), bucket 1, ..., bucket B
    ARGV  seq, mark ttl, integer (1: HINCRBY), log retention s, log field, N,
          N x (bucket number, field, amount), B bucket ttls, log entries ...

Returns 1 when applied, 0 when the batch was applied before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MARK_TTL_S = 7 * 86400  # a batch retried within a week of its first attempt counts once

SCRIPT = """
local seq = tonumber(ARGV[1])
local done = tonumber(redis.call('GET', KEYS[1]) or '0')
if seq <= done then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
local incr = 'HINCRBYFLOAT'
if ARGV[3] == '1' then incr = 'HINCRBY' end
local n = tonumber(ARGV[6])
local i = 7
for _ = 1, n do
  redis.call(incr, KEYS[2 + tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2])
  i = i + 3
end
for b = 3, #KEYS do
  redis.call('EXPIRE', KEYS[b], ARGV[i])
  i = i + 1
end
if i <= #ARGV then
  local now = redis.call('TIME')
  local minid = string.format('%d', (tonumber(now[1]) - tonumber(ARGV[4])) * 1000)
  for j = i, #ARGV do
    redis.call('XADD', KEYS[2], 'MINID', '~', minid, '*', ARGV[5], ARGV[j])
  end
end
return 1
"""


@dataclass
class Batch:
    """What one flush writes: amounts per (bucket, field) and serialized log entries."""

    seq: int
    amounts: dict[tuple[str, str], float] = field(default_factory=dict)
    entries: list[str] = field(default_factory=list)

    def flush_id(self, ledger: str) -> str:
        return f"{ledger}:{self.seq}"


@dataclass(frozen=True)
class Target:
    """Where a ledger's batches go."""

    mark: str  # the ledger's high-water mark key
    log: str | None = None  # the log stream, if the ledger keeps one
    log_field: str = "entry"
    log_retention_s: float = 86400.0
    integer: bool = False  # HINCRBY (counts) rather than HINCRBYFLOAT


def script_call(batch: Batch, target: Target, ttl_of: Callable[[str], int],
                ) -> tuple[list[str], list[str | int | float]]:
    """The script's KEYS and ARGV for ``batch``; ``ttl_of(bucket)`` is a bucket's lifetime."""
    buckets: dict[str, int] = {}
    triples: list[str | int | float] = []
    for (bucket, name), amount in batch.amounts.items():
        number = buckets.setdefault(bucket, len(buckets) + 1)
        triples += [number, name, int(amount) if target.integer else repr(float(amount))]
    keys = [target.mark, target.log or target.mark, *buckets]
    args: list[str | int | float] = [
        batch.seq, MARK_TTL_S, 1 if target.integer else 0, int(target.log_retention_s),
        target.log_field, len(batch.amounts), *triples, *(ttl_of(b) for b in buckets),
        *batch.entries]
    return keys, args
