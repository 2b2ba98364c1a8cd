"""Per-tenant quotas, enforced jointly by every regional balancer through Redis.

A :class:`QuotaGate` decides each request with one atomic script on the shared Redis (see
:mod:`tenants.quota_scripts`): GCRA buckets for requests, input tokens and output tokens per
minute, each allowing a burst of one minute's worth, and a concurrency set of leases::

    gate = QuotaGate(client, "director", local_share=1 / 3)
    admission = await gate.admit("acme", tenant.quota, tenant.redis_down, input_tokens=812,
                                 max_output_tokens=256, request_id=rid)
    if not admission.allowed:
        return Response(status=admission.status, headers=admission.headers)
    try:
        async for chunk in stream:
            await admission.charge_output(chunk.tokens)
    finally:
        await admission.finish(produced_tokens)

Output tokens are not known at admission, so they are charged as they stream (in batches of
``output_batch_tokens``, or every ``output_flush_s``) and reconciled by ``finish`` with the
count actually produced; a running stream is never cut, it only pushes the bucket into debt,
and the tenant's next request is refused until the debt is paid. ``max_output_tokens`` is not
reserved: most streams end well before it, and reserving it would refuse tenants that still
have quota.

When Redis cannot be reached (refused, timed out: every call is bounded by ``timeout_s``
whatever the client's own timeouts), tenants with ``redis-down closed`` are refused with 503,
and the others are decided in process by :class:`~tenants.local_limits.LocalLimits` at
``local_share`` of their limits (``degraded``). The gate then leaves Redis alone for
``retry_s`` seconds before trying it again, and logs each switch once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from policies.model import RedisDown, TenantQuota
from state.guard import describe
from tenants.local_limits import (
    CONCURRENT_RETRY_S,
    WINDOW_S,
    Bucket,
    Decision,
    LocalLimits,
    rate_limits,
)
from tenants.quota_scripts import (
    ADMIT,
    ADMIT_SHA,
    CHARGE,
    CHARGE_SHA,
    decision_from_reply,
    quota_keys,
)

log = logging.getLogger(__name__)

STATE_UNAVAILABLE = "state_unavailable"
DEFAULT_LEASE_S = 600.0  # a crashed balancer's concurrency slots come back after this
DEFAULT_TIMEOUT_S = 0.25
DEFAULT_RETRY_S = 1.0
DEFAULT_BATCH_TOKENS = 64
DEFAULT_FLUSH_S = 1.0

Clock = Callable[[], float]
# adds output tokens (negative: refunds) and refreshes, or with True releases, the lease;
# says whether the tokens were counted
Charge = Callable[[int, bool], Awaitable[bool]]


class _Ledger:
    """The output tokens of one admitted request, batched on their way to the quota."""

    def __init__(self, charge: Charge, clock: Clock, batch_tokens: int, flush_s: float) -> None:
        self._charge = charge
        self._clock = clock
        self._batch_tokens = batch_tokens
        self._flush_s = flush_s
        self._flushed_at = clock()
        self._pending = 0
        self._charged = 0
        self._closed = False
        self._lock = asyncio.Lock()

    async def add(self, tokens: int) -> None:
        if self._closed:
            return
        self._pending += tokens
        due = (self._pending >= self._batch_tokens
               or self._clock() - self._flushed_at >= self._flush_s)
        if not due or self._lock.locked():  # a flush under way takes these next time
            return
        async with self._lock:
            self._flushed_at = self._clock()
            batch, self._pending = self._pending, 0
            if await self._charge(batch, False):
                self._charged += batch
            else:
                self._pending += batch

    async def close(self, total: int) -> None:
        async with self._lock:  # waits for a flush under way, so nothing is counted twice
            if self._closed:
                return
            self._closed = True
            await self._charge(total - self._charged, True)


class Admission:
    """What :meth:`QuotaGate.admit` decided, and the accounting of the admitted request.

    ``status``: 200 admitted, 429 over quota, 503 refused because the shared state is down
    (``redis-down closed``). ``limit`` names the refusing limit (``requests``,
    ``input_tokens``, ``output_tokens``, ``concurrent``, ``state_unavailable``);
    ``retry_after_s`` is how long until it admits this request again (for ``concurrent``: a
    nominal second). ``headers`` are OpenAI's ``x-ratelimit-*`` ones, and ``Retry-After`` on a
    refusal. ``degraded``: decided by the balancer's local limits, Redis being unreachable.
    """

    def __init__(
        self, *, status: int, limit: str | None, retry_after_s: float, headers: dict[str, str],
        degraded: bool = False, ledger: _Ledger | None = None,
    ) -> None:
        self.allowed = status == 200
        self.status = status
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.headers = headers
        self.degraded = degraded
        self._ledger = ledger

    def __repr__(self) -> str:
        return (f"Admission(status={self.status}, limit={self.limit!r}, "
                f"retry_after_s={self.retry_after_s:.3f}, degraded={self.degraded})")

    async def charge_output(self, tokens: int) -> None:
        """Count ``tokens`` more output tokens of the running stream. Batched: at most one
        short round trip per batch, none while Redis is known to be down; never refuses,
        never raises (errors are logged, and the tokens retried with the next batch)."""
        if self._ledger is not None and tokens:
            await self._ledger.add(tokens)

    async def finish(self, output_tokens: int) -> None:
        """The request ended having produced ``output_tokens``: charge what streaming has not
        (a refund if it counted more) and release the concurrency slot. Idempotent; never
        raises (a slot it could not release comes back when its lease ends)."""
        if self._ledger is not None:
            await self._ledger.close(output_tokens)


class QuotaGate:
    """Admits a tenant's requests against its quota, jointly with every other balancer."""

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str,
        *,
        clock: Clock = time.time,
        local_share: float = 1.0,
        lease_s: float = DEFAULT_LEASE_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
        output_batch_tokens: int = DEFAULT_BATCH_TOKENS,
        output_flush_s: float = DEFAULT_FLUSH_S,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._clock = clock
        self._local = LocalLimits(local_share, lease_s)
        self._lease_s = lease_s
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._batch_tokens = output_batch_tokens
        self._flush_s = output_flush_s
        self._where = describe(client)
        self._reachable = True
        self._retry_at = 0.0

    @property
    def reachable(self) -> bool:
        """Whether the last call to Redis succeeded."""
        return self._reachable

    async def admit(
        self,
        tenant: str,
        quota: TenantQuota,
        redis_down: RedisDown,
        *,
        input_tokens: int,
        max_output_tokens: int | None,
        request_id: str,
    ) -> Admission:
        """Decide one request of ``tenant``: all of its limits admit it and are charged, or
        none is. ``request_id`` names its concurrency lease (unique per request). Raises
        ValueError on a rate limit that is not positive."""
        del max_output_tokens  # not reserved: see the module docstring
        limits = rate_limits(quota)
        if not limits and quota.concurrent is None:
            return Admission(status=200, limit=None, retry_after_s=0.0, headers={})
        if self._redis_due():
            try:
                args = self._admit_args(limits, quota, input_tokens, request_id)
                reply = await self._script(ADMIT, ADMIT_SHA, quota_keys(self._prefix, tenant),
                                           args)
            except (RedisError, OSError) as exc:
                self._lost(exc)
            else:
                self._found()
                charge = functools.partial(self._charge_shared, tenant, quota, request_id)
                return self._admission(decision_from_reply(reply, limits), quota, charge)
        if redis_down is RedisDown.CLOSED:
            return Admission(status=503, limit=STATE_UNAVAILABLE, retry_after_s=1.0,
                             headers={"Retry-After": "1"})
        decision = self._local.admit(tenant, quota, input_tokens=input_tokens,
                                     request_id=request_id, now=self._clock())
        charge = functools.partial(self._charge_local, tenant, quota, request_id)
        return self._admission(decision, quota, charge, degraded=True)

    def _admit_args(
        self, limits: dict[str, float], quota: TenantQuota, input_tokens: int, request_id: str,
    ) -> list[object]:
        intervals = [WINDOW_S / limits[name] if name in limits else 0.0
                     for name in ("requests", "input_tokens", "output_tokens")]
        slots = -1 if quota.concurrent is None else quota.concurrent
        return [*intervals, input_tokens, slots, request_id, self._lease_s, CONCURRENT_RETRY_S]

    def _admission(
        self, decision: Decision, quota: TenantQuota, charge: Charge, *, degraded: bool = False,
    ) -> Admission:
        headers = quota_headers(decision)
        if not decision.allowed:
            return Admission(status=429, limit=decision.refused_by, retry_after_s=decision.wait_s,
                             headers=headers, degraded=degraded)
        ledger = None
        if quota.output_tokens_per_minute is not None or quota.concurrent is not None:
            ledger = _Ledger(charge, self._clock, self._batch_tokens, self._flush_s)
        return Admission(status=200, limit=None, retry_after_s=0.0, headers=headers,
                         degraded=degraded, ledger=ledger)

    async def _charge_shared(
        self, tenant: str, quota: TenantQuota, request_id: str, tokens: int, release: bool,
    ) -> bool:
        if not self._redis_due():
            return False
        output = quota.output_tokens_per_minute
        keys = quota_keys(self._prefix, tenant)[2:]
        args = [WINDOW_S / output if output else 0.0, tokens, request_id,
                self._lease_s if quota.concurrent is not None else 0.0, "1" if release else "0"]
        try:
            await self._script(CHARGE, CHARGE_SHA, keys, args)
        except (RedisError, OSError) as exc:
            self._lost(exc)
            log.debug("quota: %d output tokens of %s/%s not charged: %s",
                      tokens, tenant, request_id, exc)
            return False
        self._found()
        return True

    async def _charge_local(
        self, tenant: str, quota: TenantQuota, request_id: str, tokens: int, release: bool,
    ) -> bool:
        self._local.charge(tenant, quota, request_id, tokens, release=release, now=self._clock())
        return True

    async def _script(
        self, script: str, sha: str, keys: Sequence[str], args: Sequence[object],
    ) -> list[bytes]:
        """EVALSHA, or EVAL when the server does not have the script (restarted, flushed)."""
        async with asyncio.timeout(self._timeout_s):
            try:
                reply: list[bytes] = await self._client.evalsha(sha, len(keys), *keys, *args)
            except NoScriptError:
                reply = await self._client.eval(script, len(keys), *keys, *args)
        return reply

    def _redis_due(self) -> bool:
        return self._reachable or self._clock() >= self._retry_at

    def _lost(self, exc: BaseException) -> None:
        self._retry_at = self._clock() + self._retry_s
        if self._reachable:
            self._reachable = False
            log.warning("quota state %s unreachable (%s): deciding by local limits, or "
                        "refusing redis-down-closed tenants, until it answers",
                        self._where, str(exc) or type(exc).__name__)

    def _found(self) -> None:
        if not self._reachable:
            self._reachable = True
            log.info("quota state %s reachable again: quotas are shared again", self._where)


def quota_headers(decision: Decision) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers (``requests``, and ``tokens`` for the token limit
    that refused, else the one with the smallest share left), and ``Retry-After`` (whole
    seconds, rounded up, at least 1) on a refusal."""
    headers: dict[str, str] = {}
    requests = decision.buckets.get("requests")
    if requests is not None:
        headers.update(_bucket_headers("requests", requests))
    tokens = _token_bucket(decision)
    if tokens is not None:
        headers.update(_bucket_headers("tokens", tokens))
    if not decision.allowed:
        headers["Retry-After"] = str(max(1, math.ceil(decision.wait_s)))
    return headers


def openai_duration(seconds: float) -> str:
    """A duration as OpenAI's headers write it (Go's style): ``120ms``, ``1.5s``, ``6m0s``;
    rounded up to the millisecond."""
    ms = math.ceil(round(max(0.0, seconds) * 1000, 3))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    return f"{hours}h{text}" if hours else text


def _token_bucket(decision: Decision) -> Bucket | None:
    if decision.refused_by in ("input_tokens", "output_tokens"):
        return decision.buckets[decision.refused_by]
    candidates = [decision.buckets[name] for name in ("input_tokens", "output_tokens")
                  if name in decision.buckets]
    return min(candidates, key=lambda bucket: bucket.remaining / bucket.limit, default=None)


def _bucket_headers(kind: str, bucket: Bucket) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": _number(bucket.limit),
        f"x-ratelimit-remaining-{kind}": str(bucket.remaining),
        f"x-ratelimit-reset-{kind}": openai_duration(bucket.reset_s),
    }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
