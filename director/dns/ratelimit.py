"""Response rate limiting (RRL) per client network: /24 for IPv4, /56 for IPv6.

A token bucket per network: ``rate`` responses per second, bursts up to ``burst``. A response
beyond the bucket is *limited*:

- ``off``: nothing is limited (the limiter is not even consulted);
- ``log-only``: counted and logged (at most once a second), still sent;
- ``enforce``: every ``slip``-th limited response of a network is sent truncated (TC=1,
  header and question only) so a real client retries over TCP, the others are dropped
  (``slip`` 2 by default; 1 truncates all, 0 drops all).

Only UDP answers are limited (TCP sources cannot be spoofed). Parameters: rate 20/s,
burst = rate, slip 2; the clock is injectable for tests.
"""

from __future__ import annotations

import enum
import logging
import socket
import time
from collections.abc import Callable

from director.dns.metrics import DnsStats
from director.dns.wire import truncated

log = logging.getLogger(__name__)

TABLE_LIMIT = 200_000


class RrlMode(enum.Enum):
    OFF = "off"
    LOG_ONLY = "log-only"
    ENFORCE = "enforce"


class ResponseRateLimiter:
    """Token buckets per client network; ``filter`` decides what one response becomes."""

    def __init__(self, mode: RrlMode, stats: DnsStats, *, rate: float = 20.0,
                 burst: float | None = None, slip: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mode = mode
        self.stats = stats
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, rate)
        self.slip = slip
        self.clock = clock
        self._buckets: dict[str, list[float]] = {}  # network -> [tokens, last, limited]
        self._last_log = 0.0

    def filter(self, host: str, response: bytes) -> bytes | None:
        """``response`` as it should be sent to ``host``: unchanged, truncated, or None."""
        now = self.clock()
        key = network_key(host)
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= TABLE_LIMIT:
                self._prune(now)
            self._buckets[key] = [self.burst - 1.0, now, 0.0]
            return response
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return response
        bucket[0] = tokens
        bucket[2] += 1
        if self.mode is RrlMode.LOG_ONLY:
            self.stats.rrl["would-limit"] += 1
            if now - self._last_log >= 1.0:
                self._last_log = now
                log.warning("rate limit (log-only): %s over %.0f responses/s", key, self.rate)
            return response
        if self.slip and int(bucket[2]) % self.slip == 0:
            self.stats.rrl["slipped"] += 1
            return truncated(response)
        self.stats.rrl["dropped"] += 1
        return None

    def _prune(self, now: float) -> None:
        idle = self.burst / self.rate if self.rate > 0 else 0.0
        self._buckets = {k: b for k, b in self._buckets.items() if now - b[1] < idle}
        if len(self._buckets) >= TABLE_LIMIT:
            self._buckets.clear()


def network_key(host: str) -> str:
    """The rate-limited network of an address: its /24 (IPv4) or /56 (IPv6)."""
    if ":" not in host:
        return host.rpartition(".")[0]
    try:
        packed = socket.inet_pton(socket.AF_INET6, host.split("%", 1)[0])
    except OSError:
        return host
    if packed[:12] == b"\x00" * 10 + b"\xff\xff":  # IPv4-mapped
        return ".".join(str(b) for b in packed[12:15])
    return packed[:7].hex()
