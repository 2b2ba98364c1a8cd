"""One beat at a time among many workers: a lease in the shared state.

Every worker may run beat (so that losing a worker's host loses no probes), but only the
holder of the lease ``{p}:beat:leader`` sends probes; the others wait, and take over within
a lease (``LEASE_S``) of the holder going away. The holder renews it every third of a lease
with a script that extends it only while it is still the holder's. While the state server is
unreachable a holder keeps sending until its lease would have run out, then stops (another
worker may hold it by then); a follower sends nothing. A failover that loses the lease's
last write may let two beats send for up to a lease: probes are idempotent, so that costs
a few extra probes, never a wrong result.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

import redis

log = logging.getLogger(__name__)

LEASE_S = 10.0
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) and 1 or 0
"""


class BeatLease:
    """Whether this beat may send now (``held``); ``client`` the shared state's."""

    def __init__(self, client: redis.Redis, key: str, lease_s: float = LEASE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self.lease_s = lease_s
        self.owner = secrets.token_hex(8)
        self._clock = clock
        self._renew = client.register_script(RENEW)
        self._valid_until = 0.0  # monotonic: while the lease is surely ours
        self._next_try = 0.0
        self._was_held = False

    def held(self) -> bool:
        """Try for the lease (at most every third of it); whether it is ours now."""
        now = self._clock()
        if now >= self._next_try:
            self._next_try = now + self.lease_s / 3
            try:
                if self._renew(keys=[self.key], args=[self.owner, int(self.lease_s * 1000)]):
                    self._valid_until = now + self.lease_s
                else:
                    self._valid_until = 0.0
            except redis.exceptions.RedisError as exc:
                log.warning("beat: cannot renew the lease %s: %s", self.key, exc)
        holding = now < self._valid_until
        if holding != self._was_held:
            log.warning("beat: %s the lease %s", "took" if holding else "lost", self.key)
            self._was_held = holding
        return holding

    def retry_in(self) -> float:
        return max(0.1, self._next_try - self._clock())
