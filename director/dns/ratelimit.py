"""Response rate limiting (RRL) per client network: /24 for IPv4, /56 for IPv6.

A token bucket per network: ``rate`` responses per second, bursts up to ``burst``. A query
beyond the bucket is *limited*, decided before its answer is computed (so a flood of
never-seen subnets costs a dictionary lookup per query, not an answer):

- ``off``: nothing is limited (the limiter is not even consulted);
- ``log-only`` (the default when every listen address is loopback): counted in
  ``director_dns_rrl_total{action="would-limit"}`` and logged (at most once a second),
  still answered;
- ``enforce`` (the default on any other address, and what the shipped deployments set):
  every ``slip``-th limited query of a network gets a truncated reply (TC=1, header and
  question only) so a real client retries over TCP, the others nothing (``slip`` 2 by
  default; 1 truncates all, 0 drops all).

Only UDP is limited (TCP sources cannot be spoofed). Parameters: rate 20/s, burst = rate,
slip 2; the clock is injectable for tests. See docs/dns-rate-limiting.md.
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Hashable, Iterable

from director.dns.metrics import DnsStats
from director.dns.wire import truncated

log = logging.getLogger(__name__)

TABLE_LIMIT = 200_000


class RrlMode(enum.Enum):
    OFF = "off"
    LOG_ONLY = "log-only"
    ENFORCE = "enforce"


def default_mode(hosts: Iterable[str]) -> RrlMode:
    """The mode when none is given: ``log-only`` when every listen address is loopback (a
    laptop, a test, ``director up``: every client shares 127.0.0.0/24, so enforcing would
    limit them together), ``enforce`` otherwise (a server others can reach is limited
    unless its operator says not to be)."""
    return RrlMode.LOG_ONLY if all(_is_loopback(host) for host in hosts) else RrlMode.ENFORCE


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


ALLOW, SLIP, DROP = 0, 1, 2  # what ``limit`` says of one query


class ResponseRateLimiter:
    """Token buckets per client network; ``limit`` decides what one query gets."""

    def __init__(self, mode: RrlMode, stats: DnsStats, *, rate: float = 20.0,
                 burst: float | None = None, slip: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mode = mode
        self.stats = stats
        self.rate = rate
        self.burst = burst if burst is not None else max(1.0, rate)
        self.slip = slip
        self.clock = clock
        self._enforce = mode is RrlMode.ENFORCE
        self._buckets: dict[Hashable, list[float]] = {}  # network -> [tokens, last, limited]
        self._last_log = 0.0

    def limit(self, network: Hashable, now: float) -> int:
        """Charge one response to ``network`` (``network_key``, or raw address bytes cut
        to the same prefix) at clock time ``now``: ``ALLOW`` to answer it; over the rate
        in enforce mode ``SLIP`` (answer ``slipped(query)``) or ``DROP`` (answer nothing),
        decided before the answer is computed, so a flood costs no answers."""
        bucket = self._buckets.get(network)
        if bucket is None:
            if len(self._buckets) >= TABLE_LIMIT:
                self._prune(now)
            self._buckets[network] = [self.burst - 1.0, now, 0.0]
            return ALLOW
        tokens = bucket[0] + (now - bucket[1]) * self.rate
        if tokens > self.burst:
            tokens = self.burst
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return ALLOW
        bucket[0] = tokens
        bucket[2] += 1
        if not self._enforce:
            self.stats.rrl["would-limit"] += 1
            if now - self._last_log >= 1.0:
                self._last_log = now
                log.warning("rate limit (log-only): %s over %.0f responses/s",
                            _printable(network), self.rate)
            return ALLOW
        if self.slip and int(bucket[2]) % self.slip == 0:
            self.stats.rrl["slipped"] += 1
            return SLIP
        self.stats.rrl["dropped"] += 1
        return DROP

    def check(self, host: str, query: bytes) -> tuple[bool, bytes | None]:
        """For a query from ``host`` now: (True, None) to answer it, or (False, what to send
        instead: the slip reply or None)."""
        verdict = self.limit(network_key(host), self.clock())
        if verdict == ALLOW:
            return True, None
        return False, slipped(query) if verdict == SLIP else None

    def _prune(self, now: float) -> None:
        idle = self.burst / self.rate if self.rate > 0 else 0.0
        self._buckets = {k: b for k, b in self._buckets.items() if now - b[1] < idle}
        if len(self._buckets) >= TABLE_LIMIT:
            self._buckets.clear()


def slipped(query: bytes) -> bytes | None:
    """The reply a slipped query gets: header and question with TC set, so a real client
    retries over TCP (None for what is not a query)."""
    if len(query) < 12 or query[2] & 0x80:
        return None
    return truncated(query)


def _printable(network: Hashable) -> str:
    if isinstance(network, bytes):
        if len(network) == 3:
            return ".".join(str(b) for b in network) + ".0/24"
        return network.hex() + "/56"
    return str(network)


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
