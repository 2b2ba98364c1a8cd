# SPDX-License-Identifier: Apache-2.0
"""Retry-After values that hold: a shed request is promised a second when it will be
served, and the region keeps the promise.

A request the ladder sheds is told to come back after ``Retry-After`` seconds. Each second
ahead holds at most ``share`` of what the region answers in a second (measured over the
last ten), so the promised retries never crowd out the traffic that keeps arriving; the
shed request gets the first second with room, at least ``min_after_s`` away. When the same
request (the same tenant and body: what an SDK sends again) comes back from its promised
second on, within ``grace_s``, it is redeemed (the same tenant, the same client, the same
body: another client's request with the same body is not): it skips the ladder's triggers and goes
ahead of every other request in the queue. When every second up to ``horizon_s`` is
booked, the promise is for the horizon all the same (overbooked: it is still queued first).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from regions.balancer.scheduling.error_rate import ErrorRate


@dataclass
class RetryPromises:
    share: float = 0.5
    min_after_s: int = 1
    horizon_s: int = 120
    grace_s: float = 30.0
    answered: ErrorRate = field(default_factory=ErrorRate)  # answers per second, by second
    _booked: dict[int, int] = field(default_factory=dict)  # second -> promises
    _promised: dict[str, int] = field(default_factory=dict)  # request key -> its second

    @staticmethod
    def key(tenant: str | None, client: str | None, body: bytes) -> str:
        who = f"{tenant or ''}\0{client or ''}\0".encode()
        return hashlib.sha256(who + body).hexdigest()

    def served(self, now: float) -> None:
        """A request was answered (the rate promises are measured against)."""
        self.answered.add(now, False)

    def promise(self, key: str, now: float) -> int:
        """Seconds until ``key`` may come back and be served."""
        self._forget(now)
        _, answers = self.answered.counts(now)
        per_second = max(1, math.floor(self.share * answers / self.answered.window_s))
        start = math.floor(now) + self.min_after_s
        chosen = start + self.horizon_s - 1
        for second in range(start, start + self.horizon_s):
            if self._booked.get(second, 0) < per_second:
                chosen = second
                break
        self._booked[chosen] = self._booked.get(chosen, 0) + 1
        self._promised[key] = chosen
        return max(self.min_after_s, math.ceil(chosen - now))

    def redeem(self, key: str, now: float) -> bool:
        """Whether ``key`` comes back with a promise due now (it is used up)."""
        second = self._promised.get(key)
        if second is None or not second - 1 <= now <= second + self.grace_s:
            return False
        del self._promised[key]
        return True

    def _forget(self, now: float) -> None:
        if len(self._promised) < 1024 and len(self._booked) < 1024:
            return
        stale = now - self.grace_s
        self._promised = {k: s for k, s in self._promised.items() if s >= stale}
        self._booked = {s: n for s, n in self._booked.items() if s >= stale}
