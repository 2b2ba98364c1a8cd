"""Per-tenant quotas, enforced jointly by every regional balancer through Redis.

A :class:`QuotaGate` admits a tenant's requests against GCRA buckets kept in the shared Redis
(requests, input tokens and output tokens, each refilled at its rate and holding its burst:
the count as the policy writes it, ``10/s`` ten at once, unless it declares a ``burst``;
:mod:`tenants.local_limits` has the arithmetic, :mod:`tenants.quota_scripts` the scripts)
and, if the tenant has one, a concurrency limit::

    gate = QuotaGate(client, "director", local_share=1 / 3)
    admission = await gate.admit("acme", tenant.quota, tenant.redis_down, input_tokens=812,
                                 max_output_tokens=256, request_id=rid)
    if not admission.allowed:
        return Response(status=admission.status, headers=admission.headers)
    try:
        async for chunk in stream:
            await admission.charge_output(chunk.tokens)
    finally:
        await admission.finish(produced_tokens, input_tokens=usage.prompt_tokens)
    ...
    await gate.aclose()  # at shutdown: unspent slices go back, owed tokens are charged

Rates are decided in process in the common case: the gate holds slices of the tenant's
request and input-token buckets, taken from Redis ahead of need and in the background, and
judges the output bucket's debt on what it last saw of it (:mod:`tenants.slices`: the slice
size, the refill, and the error bound across gates). A request it cannot admit from what it
holds is refused on the backlog last seen, or decided by one round trip that takes what it
needs and tops the slices up.

Input tokens are charged at admission on the caller's estimate (the balancer's: never below
the prompt's size, whatever the client declares) and settled by ``finish`` with the engine's
own count when it gives one: the difference is owed to the bucket, or comes back to it.
Output tokens are not known at admission, so they are charged as they stream and reconciled
by ``finish`` with the count actually produced (a refund if streaming counted more), batched
with the tenant's other streams at this gate (:mod:`tenants.quota_settle`: ``charge_output``
waits for a round trip once a batch of ``output_batch_tokens`` is owed, or ``output_flush_s``
after the last one; ``finish`` never waits, its tokens go in the background). A running
stream is never cut, it only pushes the bucket into debt, and the tenant's next request is
refused until the debt is paid. ``max_output_tokens`` is not reserved: most streams end well
before it, and reserving it would refuse tenants that still have quota.

Concurrency limits keep one round trip per admission. The call that adds the request's lease
to the tenant's set in Redis also charges its rates (exactly, without slices), so a limit
holds across balancers to the slot. The alternative, slots allotted to each gate and
rebalanced, would save that round trip but not survive small limits: two slots cannot be
split among three gates without refusing a request one gate could serve while another sits
on an idle slot, and moving a slot is a round trip anyway. A finished request's lease is
released off the request path: by the gate's own next admission of the tenant (which goes to
Redis anyway, so it never refuses on a slot it has just freed), or within ``release_s``;
a crashed balancer's leases end after ``lease_s``.

When Redis cannot be reached (refused, timed out: see :mod:`tenants.quota_link`), tenants
with ``redis-down closed`` are refused with 503, and the others are decided in process by
:class:`~tenants.local_limits.LocalLimits` at ``local_share`` of their limits (``degraded``).
The gate learns of an outage from its own calls (a top-up, a charge, a request it could not
decide alone), so until then it still admits from slices it holds, budget Redis had granted;
once it knows, it spends none of them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from typing import Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from policies.model import RedisDown, TenantQuota
from tenants.local_limits import (
    CONCURRENT_RETRY_S,
    Decision,
    LocalLimits,
    burst_windows,
    rate_limits,
)
from tenants.quota_headers import openai_duration, quota_headers
from tenants.quota_link import (
    DEFAULT_MAX_BACKGROUND,
    DEFAULT_MAX_TIMEOUT_S,
    DEFAULT_RETRY_S,
    DEFAULT_TIMEOUT_S,
    Clock,
    QuotaLink,
)
from tenants.quota_scripts import TAKE, TAKE_SHA, Take, Taken, quota_keys
from tenants.quota_settle import DEFAULT_RELEASE_S, Settler, TenantState, running
from tenants.slices import INPUT, OUTPUT, SLICED, SliceRules, intervals, windows

__all__ = ["Admission", "QuotaGate", "SliceRules", "openai_duration", "quota_headers"]

STATE_UNAVAILABLE = "state_unavailable"
DEFAULT_LEASE_S = 600.0  # a crashed balancer's concurrency slots come back after this
DEFAULT_BATCH_TOKENS = 64
DEFAULT_FLUSH_S = 1.0


class _Account(Protocol):
    async def add(self, tokens: int) -> None: ...

    async def close(self, total: int, input_tokens: int | None) -> None: ...


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
        degraded: bool = False, account: _Account | None = None,
    ) -> None:
        self.allowed = status == 200
        self.status = status
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.headers = headers
        self.degraded = degraded
        self._account = account

    def __repr__(self) -> str:
        return (f"Admission(status={self.status}, limit={self.limit!r}, "
                f"retry_after_s={self.retry_after_s:.3f}, degraded={self.degraded})")

    async def charge_output(self, tokens: int) -> None:
        """Count ``tokens`` more output tokens of the running stream. Batched with the
        tenant's other streams at this gate: at most one short round trip per batch, none
        while Redis is known to be down; never refuses, never raises (tokens a failed call
        could not charge are owed still)."""
        if self._account is not None and tokens:
            await self._account.add(tokens)

    async def finish(self, output_tokens: int, *, input_tokens: int | None = None) -> None:
        """The request ended having produced ``output_tokens``: owe what streaming has not
        charged (a refund if it counted more) and release the concurrency slot, both sent in
        the background. ``input_tokens``: the engine's count of the prompt (its ``usage``),
        which settles the input bucket's charge made on an estimate at admission (None: the
        estimate stands). Idempotent; never raises, never waits for Redis (a slot it could
        not release comes back when its lease ends)."""
        if self._account is not None:
            await self._account.close(output_tokens, input_tokens)


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
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
        retry_s: float = DEFAULT_RETRY_S,
        output_batch_tokens: int = DEFAULT_BATCH_TOKENS,
        output_flush_s: float = DEFAULT_FLUSH_S,
        slices: SliceRules | None = None,
        release_s: float = DEFAULT_RELEASE_S,
        max_background: int = DEFAULT_MAX_BACKGROUND,
    ) -> None:
        self._prefix = prefix
        self._clock = clock
        self._local = LocalLimits(local_share, lease_s)
        self._lease_s = lease_s
        self._rules = slices or SliceRules()
        self._link = QuotaLink(client, clock, timeout_s=timeout_s, max_timeout_s=max_timeout_s,
                               retry_s=retry_s,
                               max_background=max_background)
        self._settler = Settler(self._link, clock, self._rules, self._top_up,
                                lease_s=lease_s, batch_tokens=output_batch_tokens,
                                flush_s=output_flush_s, release_s=release_s)
        self._tenants = self._settler.tenants

    @property
    def bound_s(self) -> float:
        """How long the next call to Redis may take before this gate decides by its local
        limits (learned from round trips, within the gate's floor and ceiling)."""
        return self._link.timeout_s

    @property
    def reachable(self) -> bool:
        """Whether the last call to Redis succeeded."""
        return self._link.reachable

    def outstanding(self, tenant: str) -> dict[str, float]:
        """Units this gate holds of ``tenant``'s request and input-token buckets: charged in
        Redis, not yet spent on a request."""
        held = self._tenants.get(tenant)
        return {} if held is None else held.view.outstanding()

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
        limits, spans = _rate_limits(quota)
        if not limits and quota.concurrent is None:
            return Admission(status=200, limit=None, retry_after_s=0.0, headers={})
        if self._link.due():
            held = self._tenant(tenant, limits, spans)
            costs = {name: 1 if name == "requests" else input_tokens
                     for name in SLICED if name in limits}
            if quota.concurrent is None:
                admission = await self._admit_sliced(held, costs, input_tokens)
            else:
                admission = await self._admit_leased(held, costs, quota.concurrent, request_id,
                                                     input_tokens)
            if admission is not None:
                return admission
        if redis_down is RedisDown.CLOSED:
            return Admission(status=503, limit=STATE_UNAVAILABLE, retry_after_s=1.0,
                             headers={"Retry-After": "1"})
        decision = self._local.admit(tenant, quota, input_tokens=input_tokens,
                                     request_id=request_id, now=self._clock())
        if not decision.allowed:
            return Admission(status=429, limit=decision.refused_by,
                             retry_after_s=decision.wait_s, headers=quota_headers(decision),
                             degraded=True)
        account = None
        if (quota.output_tokens_per_minute is not None or quota.concurrent is not None
                or quota.input_tokens_per_minute is not None):
            account = _LocalAccount(self._local, self._clock, tenant, quota, request_id,
                                    input_tokens)
        return Admission(status=200, limit=None, retry_after_s=0.0,
                         headers=quota_headers(decision), degraded=True, account=account)

    async def drain(self) -> None:
        """Release the finished requests' leases now, and wait for the calls made off the
        request path (slice top-ups, charges, returns, releases) to end; output tokens
        below a batch stay owed (:meth:`aclose` settles them)."""
        await self._settler.drain()

    async def aclose(self) -> None:
        """Return every unspent slice, charge the output tokens owed and release the
        finished requests' leases, then stop. Never raises."""
        await self._settler.close()

    # -- deciding ------------------------------------------------------------------------

    def _tenant(self, tenant: str, limits: Mapping[str, float],
                spans: Mapping[str, float]) -> TenantState:
        held = self._tenants.get(tenant)
        if held is None:
            held = self._tenants[tenant] = TenantState(quota_keys(self._prefix, tenant),
                                                       self._clock())
        held.view.follow(limits, spans)
        return held

    async def _admit_sliced(
        self, held: TenantState, costs: Mapping[str, int], input_tokens: int,
    ) -> Admission | None:
        view, rules = held.view, self._rules
        while self._link.reachable:
            now = self._clock()
            plan = view.plan(costs, now)
            if plan.refused_by is not None:
                return self._refused(held, plan.refused_by, plan.wait_s, now)
            if plan.local:
                view.spend(costs)
                self._top_up(held, now)
                return self._admitted(held, None, now, input_tokens)
            refill = running(held.refill)
            if refill is None:
                break
            await asyncio.shield(refill)  # it may bring what this request lacks
        if not self._link.due():
            return None
        now = self._clock()
        reserved = view.reserve(costs)
        need = view.needs(reserved, costs)
        extra = view.wants(rules, now, prefetch=False) if running(held.refill) is None else {}
        take = Take(intervals(view.held, view.limits), need, extra,
                    windows(view.held, view.limits), output_pending=view.pending())
        task = self._link.start(self._take(held, take, reserved))
        if extra:
            self._refilling(held, task)
        answer = await self._decided(task, held, costs, None)
        if answer is None:
            return None
        taken, at = answer
        if taken.refused_by is not None:
            return self._refused(held, taken.refused_by, taken.wait_s, at)
        return self._admitted(held, None, at, input_tokens)

    async def _admit_leased(
        self, held: TenantState, costs: Mapping[str, int], slots: int, request_id: str,
        input_tokens: int,
    ) -> Admission | None:
        flush = running(held.flush)
        if held.releasing and flush is not None:
            await asyncio.shield(flush)  # so that a slot freed here is free in Redis
        releases = held.take_releases()
        view = held.view
        need = view.needs(dict.fromkeys(costs, 0.0), costs)  # the rates exactly, no slices
        extra = {}
        if running(held.refill) is None:  # a slice of the output bucket, as for any tenant
            extra = {name: units for name, units in
                     view.wants(self._rules, self._clock(), prefetch=False).items()
                     if name == OUTPUT}
        take = Take(intervals(view.held, view.limits), need, extra,
                    windows(view.held, view.limits), output_pending=view.pending(),
                    slots=slots, request_id=request_id, lease_s=self._lease_s,
                    busy_wait_s=CONCURRENT_RETRY_S, releases=releases)
        task = self._link.start(self._take(held, take, {}))
        if extra:
            self._refilling(held, task)
        answer = await self._decided(task, held, {}, request_id)
        if answer is None:
            return None
        taken, at = answer
        if taken.refused_by is not None:
            return self._refused(held, taken.refused_by, taken.wait_s, at)
        return self._admitted(held, request_id, at, input_tokens)

    async def _decided(
        self, task: asyncio.Task[tuple[Taken, float] | None], held: TenantState,
        costs: Mapping[str, int], lease: str | None,
    ) -> tuple[Taken, float] | None:
        """Wait for Redis to decide; if the caller gives up first (the client left), what
        Redis then grants goes back: the units to what the gate holds, the lease released."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(functools.partial(self._abandoned, held, costs, lease))
            raise

    def _abandoned(
        self, held: TenantState, costs: Mapping[str, int], lease: str | None,
        task: asyncio.Task[tuple[Taken, float] | None],
    ) -> None:
        answer = None if task.cancelled() or task.exception() else task.result()
        if answer is None or answer[0].refused_by is not None:
            return
        held.view.unreserve(costs)
        if lease is not None:
            held.put_back([lease], self._clock())
            self._settler.wake()

    def _admitted(self, held: TenantState, lease: str | None, at: float,
                  input_tokens: int) -> Admission:
        """Admitted, charged ``input_tokens``; the headers show the buckets as they were at
        ``at``."""
        decision = Decision(None, 0.0, held.view.buckets(at))
        account = None
        if OUTPUT in held.view.limits or INPUT in held.view.limits or lease is not None:
            account = _SharedAccount(self._settler, held, lease, input_tokens)
        return Admission(status=200, limit=None, retry_after_s=0.0,
                         headers=quota_headers(decision), account=account)

    def _refused(self, held: TenantState, limit: str, wait_s: float, at: float) -> Admission:
        decision = Decision(limit, wait_s, held.view.buckets(at))
        return Admission(status=429, limit=limit, retry_after_s=wait_s,
                         headers=quota_headers(decision))

    # -- taking slices -------------------------------------------------------------------

    async def _take(
        self, held: TenantState, take: Take, reserved: Mapping[str, float],
    ) -> tuple[Taken, float] | None:
        """Run ``TAKE`` and apply its reply to the view: the reply and when it was sent;
        None if Redis failed."""
        sent_at = self._clock()
        try:
            reply = await self._link.run(TAKE, TAKE_SHA, held.keys, take.args())
        except (RedisError, OSError) as exc:
            self._link.lost(exc)
            held.view.unreserve(reserved)
            held.put_back(list(take.releases), sent_at)
            return None
        self._link.found()
        taken = Taken.from_reply(reply)
        held.view.see(taken.backlogs, sent_at)
        if taken.refused_by is None:
            held.view.took(taken.granted, take.need, sent_at)
            if take.extra:
                self._settler.wake()  # to return them if they expire
        else:
            held.view.unreserve(reserved)
        return taken, sent_at

    def _top_up(self, held: TenantState, now: float) -> None:
        """Take the slices running low, in the background."""
        if running(held.refill) is not None or not self._link.reachable:
            return
        extra = held.view.wants(self._rules, now, prefetch=True)
        if not extra:
            return
        take = Take(intervals(held.view.held, held.view.limits), {}, extra,
                    windows(held.view.held, held.view.limits))
        self._refilling(held, self._link.background(self._take(held, take, {})))

    @staticmethod
    def _refilling(held: TenantState, task: asyncio.Task[tuple[Taken, float] | None]) -> None:
        held.refill = task

        def done(_: asyncio.Task[tuple[Taken, float] | None]) -> None:
            if held.refill is task:
                held.refill = None

        task.add_done_callback(done)


@functools.lru_cache(maxsize=1024)
def _rate_limits(quota: TenantQuota) -> tuple[Mapping[str, float], Mapping[str, float]]:
    """The per-minute rates and their buckets' spans (the same few quotas, request after
    request)."""
    return rate_limits(quota), burst_windows(quota)


class _SharedAccount:
    """The output tokens, the input tokens' settlement and the lease of a request admitted
    through Redis."""

    def __init__(self, settler: Settler, held: TenantState, lease: str | None,
                 input_charged: int) -> None:
        self._settler = settler
        self._held = held
        self._lease = lease
        self._input_charged = input_charged
        self._charged = 0
        self._closed = False

    async def add(self, tokens: int) -> None:
        if self._closed:
            return
        self._charged += tokens
        await self._settler.owe(self._held, tokens, self._lease)

    async def close(self, total: int, input_tokens: int | None) -> None:
        if self._closed:
            return
        self._closed = True
        input_owed = 0 if input_tokens is None else input_tokens - self._input_charged
        self._settler.finished(self._held, total, total - self._charged, self._lease,
                               input_owed=input_owed)


class _LocalAccount:
    """The output tokens, the input tokens' settlement and the lease of a request admitted
    by the local limits."""

    def __init__(self, local: LocalLimits, clock: Clock, tenant: str, quota: TenantQuota,
                 request_id: str, input_charged: int) -> None:
        self._local = local
        self._clock = clock
        self._tenant = tenant
        self._quota = quota
        self._request_id = request_id
        self._input_charged = input_charged
        self._charged = 0
        self._closed = False

    async def add(self, tokens: int) -> None:
        if not self._closed:
            self._charged += tokens
            self._local.charge(self._tenant, self._quota, self._request_id, tokens,
                               release=False, now=self._clock())

    async def close(self, total: int, input_tokens: int | None) -> None:
        if not self._closed:
            self._closed = True
            input_owed = 0 if input_tokens is None else input_tokens - self._input_charged
            self._local.charge(self._tenant, self._quota, self._request_id,
                               total - self._charged, release=True, now=self._clock(),
                               input_tokens=input_owed)
