"""Quota decisions, and the in-process limiter a balancer falls back on while Redis is down.

GCRA (the generic cell rate algorithm) keeps one number per bucket, its theoretical arrival
time ``tat``. With a limit of ``L`` units per minute and a burst of ``B`` units (the bucket's
size), each unit moves ``tat`` forward by the emission interval ``T = 60 / L`` seconds, the
bucket spans ``W = B·T`` seconds, and it admits a cost ``c`` at time ``now`` when

    max(tat, now) + min(c·T, W) - W <= now

that is, when at most ``B`` units are owed: a full bucket admits ``B`` at once, then one unit
every ``T`` (so at most ``B + L·t/60`` in any ``t`` seconds). The policy's ``10/s`` is
``L = 600``, ``B = 10``; ``600/min`` is ``L = B = 600``; ``10/s burst 40`` is ``L = 600``,
``B = 40`` (``policies.model.TenantQuota``; without a burst, ``B = L``: one minute's worth). A
refused request may come back after ``max(tat, now) + min(c·T, W) - W - now`` seconds. A cost
above the whole bucket is checked as the whole bucket (admitted into a full bucket, leaving it
in debt), so that a large request is slowed down rather than refused forever. The Lua script
of :mod:`tenants.quota_scripts` is the same arithmetic on the Redis server's clock.

:class:`LocalLimits` applies it in process, per tenant, with every limit multiplied by the
balancer's ``share`` (concurrency rounded up, so no tenant is shut out by the rounding): a
balancer cut off from Redis stays bounded without being able to see the others.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from policies.model import TenantQuota

WINDOW_S = 60.0  # rates are per minute; a bucket without a burst holds a minute's worth
RATE_LIMITS = ("requests", "input_tokens", "output_tokens")
CONCURRENT = "concurrent"
TOLERANCE_S = 1e-6  # a wait this short is rounding: admitted (the scripts agree)
CONCURRENT_RETRY_S = 1.0  # a slot frees when any running request ends: nothing to compute


class Bucket(NamedTuple):
    """One rate limit as a decision left it: its size ``limit`` (the units it admits at
    once when full), the units it would admit ``remaining`` now, and ``reset_s`` until it
    is full again (a tuple: one is made for each limit of each request)."""

    limit: float
    remaining: int
    reset_s: float

    @classmethod
    def from_backlog(cls, limit: float, backlog_s: float, window_s: float = WINDOW_S) -> Bucket:
        """The bucket of ``limit`` a minute spanning ``window_s`` whose ``tat`` is
        ``backlog_s`` seconds ahead of now."""
        interval = WINDOW_S / limit
        remaining = math.floor((window_s - backlog_s) / interval + 1e-9)
        return cls(round(window_s / interval, 6), max(0, remaining), max(0.0, backlog_s))


@dataclass(frozen=True)
class Decision:
    """What one admission check found: ``refused_by`` names the limit (None: admitted), and
    ``wait_s`` is how long until it would admit this request."""

    refused_by: str | None
    wait_s: float
    buckets: Mapping[str, Bucket] = field(default_factory=dict)  # the limited rates only

    @property
    def allowed(self) -> bool:
        return self.refused_by is None


def rate_limits(quota: TenantQuota, share: float = 1.0) -> dict[str, float]:
    """The limited rates of ``quota``, per minute, times ``share``; raises ValueError on a
    limit that is not positive (a tenant to refuse has ``concurrent 0`` or no access)."""
    limits = {
        "requests": quota.requests_per_minute,
        "input_tokens": quota.input_tokens_per_minute,
        "output_tokens": quota.output_tokens_per_minute,
    }
    rates: dict[str, float] = {}
    for name, limit in limits.items():
        if limit is None:
            continue
        if not limit > 0:
            raise ValueError(f"quota {name} per minute must be positive, not {limit}")
        rates[name] = limit * share
    return rates


def burst_windows(quota: TenantQuota) -> dict[str, float]:
    """The seconds each limited rate's bucket spans (``W = B·T``; a minute without a
    burst), by name; the same at any share of the limits (both scale)."""
    limits = {
        "requests": (quota.requests_per_minute, quota.requests_burst),
        "input_tokens": (quota.input_tokens_per_minute, quota.input_tokens_burst),
        "output_tokens": (quota.output_tokens_per_minute, quota.output_tokens_burst),
    }
    windows: dict[str, float] = {}
    for name, (limit, burst) in limits.items():
        if limit is None:
            continue
        if burst is not None and not burst > 0:
            raise ValueError(f"quota {name} burst must be positive, not {burst}")
        windows[name] = WINDOW_S if burst is None or not limit > 0 else burst * WINDOW_S / limit
    return windows


def gcra_wait(tat: float, now: float, interval: float, cost: float,
              window_s: float = WINDOW_S) -> float:
    """Seconds until a bucket at ``tat`` spanning ``window_s`` admits ``cost`` units (<= 0:
    admits it now). Within a microsecond counts as now: ``tat`` is a sum of intervals (0.1 s
    for ``10/s``) that floats do not add exactly, and Redis keeps it to the microsecond."""
    wait = max(tat, now) + min(cost * interval, window_s) - window_s - now
    return wait if wait > TOLERANCE_S else min(wait, 0.0)


class LocalLimits:
    """In-process GCRA buckets and concurrency leases, per tenant, at ``share`` of each limit."""

    def __init__(self, share: float, lease_s: float) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"local share must be in (0, 1], not {share}")
        self.share = share
        self.lease_s = lease_s
        self._tat: dict[tuple[str, str], float] = {}
        self._leases: dict[str, dict[str, float]] = {}  # tenant -> request id -> expiry

    def concurrent_limit(self, quota: TenantQuota) -> int | None:
        if quota.concurrent is None:
            return None
        return math.ceil(quota.concurrent * self.share)

    def admit(
        self, tenant: str, quota: TenantQuota, *, input_tokens: int, request_id: str,
        now: float,
    ) -> Decision:
        """All or nothing: either every limit admits the request and each is charged, or
        none is charged."""
        rates = rate_limits(quota, self.share)
        windows = burst_windows(quota)
        costs = {"requests": 1, "input_tokens": input_tokens, "output_tokens": 0}
        refused_by, wait = None, 0.0
        for name, limit in rates.items():
            waited = gcra_wait(self._tat_of(tenant, name, now), now, WINDOW_S / limit,
                               costs[name], windows[name])
            if waited > wait:
                refused_by, wait = name, waited
        leases = self._leases.setdefault(tenant, {})
        for held, expiry in list(leases.items()):
            if expiry <= now:
                del leases[held]
        slots = self.concurrent_limit(quota)
        if (slots is not None and request_id not in leases and len(leases) >= slots
                and wait < CONCURRENT_RETRY_S):
            refused_by, wait = CONCURRENT, CONCURRENT_RETRY_S
        if refused_by is None:
            for name, limit in rates.items():
                if costs[name] > 0:
                    self._charge(tenant, name, limit, costs[name], now)
            if slots is not None:
                leases[request_id] = now + self.lease_s
        buckets = {name: Bucket.from_backlog(limit, self._tat_of(tenant, name, now) - now,
                                             windows[name])
                   for name, limit in rates.items()}
        return Decision(refused_by, max(0.0, wait), buckets)

    def charge(
        self, tenant: str, quota: TenantQuota, request_id: str, tokens: int, *, release: bool,
        now: float, input_tokens: int = 0,
    ) -> None:
        """Add output tokens and ``input_tokens`` (the engine's count less the estimate
        charged at admission; negative: a refund) and refresh, or ``release``, the lease."""
        rates = rate_limits(quota, self.share)
        for name, units in (("output_tokens", tokens), ("input_tokens", input_tokens)):
            limit = rates.get(name)
            if limit is not None and units:
                self._charge(tenant, name, limit, units, now)
        leases = self._leases.get(tenant, {})
        if release:
            leases.pop(request_id, None)
        elif request_id in leases:
            leases[request_id] = now + self.lease_s

    def _tat_of(self, tenant: str, name: str, now: float) -> float:
        return max(self._tat.get((tenant, name), now), now)

    def _charge(self, tenant: str, name: str, limit: float, cost: float, now: float) -> None:
        tat = self._tat_of(tenant, name, now) + cost * WINDOW_S / limit
        self._tat[(tenant, name)] = max(tat, now)
